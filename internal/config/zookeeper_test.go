package config

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestZooKeeper(t *testing.T) {
	cfg := parse(t, `
[zookeeper]
servers = ["zk1:2181", "zk2:2181", "[::1]:2181"]
session_timeout = "20s"
root = "/prod/slotd"
username = "slotd"
password = "pw"
`+minimal)
	z := cfg.ZooKeeper
	if !cfg.UsesZooKeeper() || cfg.Embedded() || !slices.Equal(z.Servers, []string{"zk1:2181", "zk2:2181", "[::1]:2181"}) ||
		z.SessionTimeout != 20*time.Second || z.Root != "/prod/slotd" || z.Username != "slotd" || z.Password != "pw" {
		t.Fatalf("zookeeper = %+v", z)
	}
	// The session timeout defaults to the longest lease.
	cfg = parse(t, "[zookeeper]\nservers = [\"zk1:2181\"]\n"+minimal+"lease = \"40s\"\ndone_ttl = \"2h\"\n")
	if cfg.ZooKeeper.SessionTimeout != 40*time.Second || cfg.ZooKeeper.Root != DefaultZooKeeperRoot {
		t.Fatalf("defaults: %+v", cfg.ZooKeeper)
	}
	if cfg := parse(t, minimal); cfg.UsesZooKeeper() || !cfg.Embedded() {
		t.Fatal("no [zookeeper]: not embedded")
	}
}

func TestZooKeeperErrors(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"[zookeeper]\nroot = \"/x\"", "zookeeper.servers: missing"},
		{"[zookeeper]\nservers = []", "zookeeper.servers: empty"},
		{"[zookeeper]\nservers = \"zk1:2181\"", "zookeeper.servers: must be an array"},
		{"[zookeeper]\nservers = [\"zk1\"]", "zookeeper.servers: item 1 (zk1) is not host:port"},
		{"[zookeeper]\nservers = [\"zk1:99999\"]", "is not host:port"},
		{"[zookeeper]\nservers = [\"zk1:2181\"]\nsession_timeout = \"5s\"", `zookeeper.session_timeout: 5s is shorter than task "report"'s lease 15s`},
		{"[zookeeper]\nservers = [\"zk1:2181\"]\nsession_timeout = \"0s\"", "zookeeper.session_timeout"},
		{"[zookeeper]\nservers = [\"zk1:2181\"]\nroot = \"slotd/\"", "zookeeper.root"},
		{"[zookeeper]\nservers = [\"zk1:2181\"]\nusername = \"u\"", "zookeeper.username: digest auth needs both"},
		{"[zookeeper]\nservers = [\"zk1:2181\"]\ncolour = 1", `unknown key "zookeeper.colour"`},
		{"[redis]\nurl = \"redis://db:6379\"\n[zookeeper]\nservers = [\"zk1:2181\"]", "exclusive"},
		{"[etcd]\nendpoints = [\"http://etcd1:2379\"]\n[zookeeper]\nservers = [\"zk1:2181\"]", "[zookeeper] and [etcd] are exclusive"},
	} {
		_, err := Parse([]byte(tc.src+minimal), "test.toml", nil, testPlugins)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err = %v, want it to contain %q", tc.src, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "pw") {
			t.Errorf("%q: error quotes the password: %v", tc.src, err)
		}
	}
}
