package config

import (
	"slices"
	"strings"
	"testing"
)

const etcdTask = `
[[task]]
name = "t"
schedule = "@hourly"
plugin = "exec"
  [task.params]
  command = ["true"]
`

func TestEtcdSection(t *testing.T) {
	cfg, err := Parse([]byte(`[etcd]
endpoints = ["http://e1:2379", "http://e2:2379/", "http://127.0.0.1:2379"]
username = "slotd"
password = "pw"
prefix = "jobs"
`+etcdTask), "t.toml", nil, testPlugins)
	if err != nil {
		t.Fatal(err)
	}
	e := cfg.Etcd
	if !cfg.UsesEtcd() || cfg.Embedded() || !slices.Equal(e.Endpoints, []string{"http://e1:2379", "http://e2:2379", "http://127.0.0.1:2379"}) ||
		e.Username != "slotd" || e.Password != "pw" || cfg.Prefix != "jobs" || e.TLSConfig != nil {
		t.Fatalf("etcd options = %+v, prefix %q", e, cfg.Prefix)
	}
	cfg, err = Parse([]byte("[etcd]\nendpoints = [\"https://e1:2379\"]\n"+etcdTask), "t.toml", nil, testPlugins)
	if err != nil || cfg.Etcd.TLSConfig == nil {
		t.Fatalf("https endpoints: %v, TLS %v", err, cfg.Etcd.TLSConfig)
	}
}

// Every mistake in [etcd] is a load error naming the key.
func TestEtcdErrorsNameTheKey(t *testing.T) {
	for _, tc := range []struct{ name, file, want string }{
		{"no endpoints", "[etcd]\nusername = \"u\"\npassword = \"p\"", "etcd.endpoints: missing"},
		{"empty endpoints", "[etcd]\nendpoints = []", "etcd.endpoints: empty"},
		{"not a list", "[etcd]\nendpoints = \"http://e1:2379\"", "etcd.endpoints: must be an array"},
		{"no scheme", "[etcd]\nendpoints = [\"e1:2379\"]", "etcd.endpoints: item 1 is not a client URL"},
		{"no port", "[etcd]\nendpoints = [\"http://e1\"]", "etcd.endpoints: item 1"},
		{"user in url", "[etcd]\nendpoints = [\"http://u:secret@e1:2379\"]", "etcd.endpoints: item 1"},
		{"mixed schemes", "[etcd]\nendpoints = [\"http://e1:2379\", \"https://e2:2379\"]", "etcd.endpoints: mixes"},
		{"user without password", "[etcd]\nendpoints = [\"http://e1:2379\"]\nusername = \"u\"", "etcd.username: etcd auth needs both"},
		{"tls files without https", "[etcd]\nendpoints = [\"http://e1:2379\"]\ntls_ca_file = \"/x\"", "etcd.tls_ca_file: needs TLS"},
		{"unreadable CA", "[etcd]\nendpoints = [\"https://e1:2379\"]\ntls_ca_file = \"/nonexistent/ca.pem\"", "etcd.tls_ca_file:"},
		{"unknown key", "[etcd]\nendpoints = [\"http://e1:2379\"]\nurl = \"x\"", "etcd.url"},
		{"with redis", "[redis]\nurl = \"redis://r:6379\"\n[etcd]\nendpoints = [\"http://e1:2379\"]", "etcd.endpoints: [etcd] and [redis]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.file+"\n"+etcdTask), "t.toml", nil, testPlugins)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Fatalf("the error quotes a password: %v", err)
			}
		})
	}
}
