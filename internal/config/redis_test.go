package config

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestRedisModes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		redis string
		mode  string
		check func(*Config) bool
	}{
		{"embedded", ``, ModeEmbedded, func(c *Config) bool { return c.Embedded() }},
		{"embedded with empty url", `url = ""`, ModeEmbedded, func(c *Config) bool { return c.Embedded() }},
		{"url with ACL user", `url = "redis://slotd:pw@db.internal:6380/3"`, ModeURL,
			func(c *Config) bool { return c.RedisURL == "redis://slotd:pw@db.internal:6380/3" && !c.Embedded() }},
		{"url over TLS", `url = "rediss://slotd:pw@db.internal:6380/0"`, ModeURL, nil},
		{"url with min_replicas_ack", "url = \"redis://db:6379\"\nmin_replicas_ack = 1", ModeURL,
			func(c *Config) bool { return c.Redis.MinReplicasAck == 1 }},
		{"sentinel", `addrs = ["s1:26379", "s2:26379", "[::1]:26379"]
master_name = "mymaster"
username = "slotd"
password = "pw"
sentinel_username = "sent"
sentinel_password = "spw"
db = 2
min_replicas_ack = 1`, ModeSentinel, func(c *Config) bool {
			o := c.Redis
			return slices.Equal(o.Addrs, []string{"s1:26379", "s2:26379", "[::1]:26379"}) && o.MasterName == "mymaster" &&
				o.Username == "slotd" && o.Password == "pw" && o.SentinelUsername == "sent" && o.SentinelPassword == "spw" &&
				o.DB == 2 && o.MinReplicasAck == 1 && !o.Cluster
		}},
		{"sentinel with empty url", "url = \"\"\naddrs = [\"s1:26379\"]\nmaster_name = \"m\"", ModeSentinel, nil},
		{"cluster", "addrs = [\"n1:6379\", \"n2:6379\"]\ncluster = true\npassword = \"pw\"", ModeCluster,
			func(c *Config) bool { return c.Redis.Cluster && len(c.Redis.Addrs) == 2 && c.Redis.Password == "pw" }},
		{"one cluster seed", "addrs = [\"n1:6379\"]\ncluster = true", ModeCluster, nil},
		{"redlock", `redlock = ["redis://:pw@a:6379", "redis://b:6379/2", "rediss://c:6380", "redis://a:6380"]`, ModeRedlock,
			func(c *Config) bool {
				return slices.Equal(c.Redis.Redlock, []string{"redis://:pw@a:6379", "redis://b:6379/2", "rediss://c:6380", "redis://a:6380"}) &&
					c.RedisURL == "" && !c.Embedded()
			}},
		{"redlock with empty url", "url = \"\"\nredlock = [\"redis://a:1\", \"redis://b:1\", \"redis://c:1\"]", ModeRedlock, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse([]byte("[redis]\n"+tc.redis+"\n"+minimal), "test.toml", nil, testPlugins)
			if err != nil {
				t.Fatal(err)
			}
			if got := cfg.RedisMode(); got != tc.mode {
				t.Errorf("mode = %q, want %q", got, tc.mode)
			}
			if tc.check != nil && !tc.check(cfg) {
				t.Errorf("config read as %+v (url %q)", cfg.Redis, cfg.RedisURL)
			}
		})
	}
}

func TestRedisModeErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		redis string
		want  []string
	}{
		{"url with addrs", "url = \"redis://h:6379\"\naddrs = [\"h:6379\"]\ncluster = true", []string{"redis.addrs", "together with url", "use one"}},
		{"master_name with cluster", "addrs = [\"h:26379\"]\nmaster_name = \"m\"\ncluster = true", []string{"redis.cluster", "together with master_name"}},
		{"addrs alone", "addrs = [\"h:6379\", \"g:6379\"]", []string{"redis.addrs", "needs master_name", "cluster = true"}},
		{"addrs with cluster false", "addrs = [\"h:6379\"]\ncluster = false", []string{"redis.addrs", "needs master_name"}},
		{"empty addrs", "addrs = []\ncluster = true", []string{"redis.addrs", "is empty"}},
		{"addrs not an array", "addrs = \"h:6379\"\ncluster = true", []string{"redis.addrs", "must be an array", `the string "h:6379"`}},
		{"addr not a string", "addrs = [6379]\ncluster = true", []string{"redis.addrs", "item 1", "the integer 6379"}},
		{"addr without port", "addrs = [\"h\"]\ncluster = true", []string{"redis.addrs", `item 1 "h"`, "want host:port"}},
		{"addr bad port", "addrs = [\"h:1\", \"h:70000\"]\ncluster = true", []string{"redis.addrs", `item 2 "h:70000"`, "1 to 65535"}},
		{"addr named port", "addrs = [\"h:redis\"]\ncluster = true", []string{"redis.addrs", "1 to 65535"}},
		{"addr empty host", "addrs = [\":6379\"]\ncluster = true", []string{"redis.addrs", "host is empty"}},
		{"addr twice", "addrs = [\"h:6379\", \"h:6379\"]\ncluster = true", []string{"redis.addrs", "item 2", "twice"}},
		{"master_name without addrs", "master_name = \"m\"", []string{"redis.master_name", "needs addrs"}},
		{"cluster without addrs", "cluster = true", []string{"redis.cluster", "needs addrs"}},
		{"cluster not a bool", "addrs = [\"h:1\"]\ncluster = \"yes\"", []string{"redis.cluster", "must be a boolean", `the string "yes"`}},
		{"master_name empty", "addrs = [\"h:1\"]\nmaster_name = \"\"", []string{"redis.master_name"}},
		{"password with url", "url = \"redis://h:6379\"\npassword = \"pw\"", []string{"redis.password", "only with addrs", "in the URL"}},
		{"username embedded", "username = \"u\"", []string{"redis.username", "only with addrs"}},
		{"db with url", "url = \"redis://h:6379\"\ndb = 1", []string{"redis.db", "only with addrs"}},
		{"db on a cluster", "addrs = [\"h:1\"]\ncluster = true\ndb = 1", []string{"redis.db", "only database 0"}},
		{"db negative", "addrs = [\"h:1\"]\nmaster_name = \"m\"\ndb = -1", []string{"redis.db", "out of range"}},
		{"sentinel_password on a cluster", "addrs = [\"h:1\"]\ncluster = true\nsentinel_password = \"x\"", []string{"redis.sentinel_password", "only with master_name"}},
		{"sentinel_username with url", "url = \"redis://h:6379\"\nsentinel_username = \"x\"", []string{"redis.sentinel_username", "only with master_name"}},
		{"min_replicas_ack embedded", "min_replicas_ack = 1", []string{"redis.min_replicas_ack", "needs Redis"}},
		{"min_replicas_ack negative", "url = \"redis://h:6379\"\nmin_replicas_ack = -1", []string{"redis.min_replicas_ack", "out of range"}},
		{"min_replicas_ack string", "url = \"redis://h:6379\"\nmin_replicas_ack = \"1\"", []string{"redis.min_replicas_ack", "must be an integer"}},
		{"redlock with url", "url = \"redis://h:6379\"\nredlock = [\"redis://a:1\", \"redis://b:1\", \"redis://c:1\"]", []string{"redis.redlock", "together with url"}},
		{"redlock with addrs", "addrs = [\"h:1\"]\ncluster = true\nredlock = [\"redis://a:1\", \"redis://b:1\", \"redis://c:1\"]", []string{"redis.redlock", "together with addrs", "together with cluster"}},
		{"redlock with min_replicas_ack", "min_replicas_ack = 1\nredlock = [\"redis://a:1\", \"redis://b:1\", \"redis://c:1\"]", []string{"redis.redlock", "together with min_replicas_ack"}},
		{"redlock too short", "redlock = [\"redis://a:1\", \"redis://b:1\"]", []string{"redis.redlock", "lists 2 URL(s)", "at least 3"}},
		{"redlock not an array", "redlock = \"redis://a:1\"", []string{"redis.redlock", "must be an array", "the string"}},
		{"redlock item not a string", "redlock = [\"redis://a:1\", 2, \"redis://c:1\"]", []string{"redis.redlock", "item 2", "the integer 2"}},
		{"redlock bad url", "redlock = [\"redis://a:1\", \"http://b:1\", \"redis://c:1\"]", []string{"redis.redlock", "item 2", "invalid Redis URL"}},
		{"redlock tls file without rediss", "redlock = [\"redis://a:1\", \"redis://b:1\", \"redis://c:1\"]\ntls_ca_file = \"/nonexistent\"", []string{"redis.tls_ca_file", "needs TLS"}},
		{"redlock tls = true", "redlock = [\"rediss://a:1\", \"rediss://b:1\", \"rediss://c:1\"]\ntls = true", []string{"redis.tls", "only with addrs"}},
		{"redlock rediss with a missing CA file", "redlock = [\"rediss://a:1\", \"rediss://b:1\", \"rediss://c:1\"]\ntls_ca_file = \"/nonexistent/ca.pem\"", []string{"redis.tls_ca_file", "/nonexistent/ca.pem"}},
		{"redlock same server twice", "redlock = [\"redis://a:1/0\", \"redis://b:1\", \"redis://:pw@a:1/3\"]", []string{"redis.redlock", "items 1 and 3", "same server a:1"}},
		{"unknown key", "url = \"redis://h:6379\"\nsentinels = [\"h:1\"]", []string{`unknown key "redis.sentinels"`, "master_name"}},
	} {
		t.Run(tc.name, func(t *testing.T) { wantRedisError(t, tc.redis, tc.want) })
	}
}

// Passwords are never quoted in errors, nor the redlock URLs that hold them.
func TestRedlockErrorsHidePasswords(t *testing.T) {
	for _, redlock := range []string{
		`["redis://:s3cret@a:1", "redis://:s3cret@a:1", "redis://c:1"]`,
		`["redis://:s3cret@a:1", "redis://:s3cret@b:1/x", "redis://c:1"]`,
		`["redis://:s3cret@a:1", "redis://:s3cret@b:1"]`,
	} {
		_, err := Parse([]byte("[redis]\nredlock = "+redlock+"\n"+minimal), "x", nil, testPlugins)
		if err == nil || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("redlock = %s: err = %v; want an error that does not quote the password", redlock, err)
		}
	}
}

// Passwords are never quoted in errors.
func TestRedisModeErrorsHidePasswords(t *testing.T) {
	_, err := Parse([]byte("[redis]\nurl = \"redis://h:6379\"\npassword = \"s3cret\"\nsentinel_password = \"s3cret2\"\n"+minimal), "x", nil, testPlugins)
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("err = %v; want errors that do not quote the passwords", err)
	}
}

// wantRedisError loads a config with the [redis] keys redis and checks
// that the error contains every string of want.
func wantRedisError(t *testing.T, redis string, want []string) {
	t.Helper()
	_, err := Parse([]byte("[redis]\n"+redis+"\n"+minimal), "test.toml", nil, testPlugins)
	if err == nil {
		t.Fatalf("no error; want one containing %q", want)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q\ndoes not contain %q", err, w)
		}
	}
}

// ParseRedisURL is the one parser of Redis URLs: a good one gives go-redis's
// options, a bad one an error that never quotes it (it may hold a password).
func TestParseRedisURL(t *testing.T) {
	opt, err := ParseRedisURL("rediss://slotd:s3cret@db.internal:6380/3")
	if err != nil || opt.Username != "slotd" || opt.Password != "s3cret" || opt.Addr != "db.internal:6380" || opt.DB != 3 || opt.TLSConfig == nil {
		t.Errorf("ParseRedisURL(good) = %+v, %v", opt, err)
	}
	for _, u := range []string{
		"redis://:s3cret@host:notaport/0",
		"redis://:s3cret@host:6379/notadb",
		"http://:s3cret@host:6379/0",
		"redis://:s3cret@[::1/0",
	} {
		_, err := ParseRedisURL(u)
		if err == nil || strings.Contains(err.Error(), "s3cret") || !strings.HasPrefix(err.Error(), "invalid Redis URL (want ") {
			t.Errorf("ParseRedisURL(%q) error = %v; want an invalid Redis URL error that does not quote the password", u, err)
		}
	}
}

// Malformed Redis URLs whose user and password hold markers: no error of
// ParseRedisURL, nor of url, url_env or redlock, holds any three bytes in
// a row of the user or the password. net/url's and go-redis's errors quote
// the part they stumble on, which is a piece of the password when it holds
// a character that must be percent-encoded (`invalid port ":s3cr" after
// host`, all of it when the URL ends in /).
func TestRedisURLErrorsNeverQuoteUserinfo(t *testing.T) {
	for _, u := range malformedRedisURLs() {
		_, err := ParseRedisURL(u.url)
		if err == nil {
			continue // a valid URL (the marker is then a host or a path)
		}
		checkNoUserinfo(t, "ParseRedisURL("+u.url+")", err.Error(), u.user, u.password)
		if !strings.HasPrefix(err.Error(), "invalid Redis URL (want ") {
			t.Errorf("ParseRedisURL(%q) = %v", u.url, err)
		}
		for key, src := range map[string]string{
			"url":     "url = " + tomlString(u.url),
			"redlock": "redlock = [\"redis://a:1\", " + tomlString(u.url) + ", \"redis://c:1\"]",
			"url_env": "url_env = \"SLOTD_TEST_URL\"",
		} {
			t.Setenv("SLOTD_TEST_URL", u.url)
			_, err := Parse([]byte("[redis]\n"+src+"\n"+minimal), "x.toml", nil, testPlugins)
			if err == nil {
				t.Errorf("%s = %q accepted", key, u.url)
				continue
			}
			checkNoUserinfo(t, key+" = "+u.url, err.Error(), u.user, u.password)
		}
	}
	// Some errors say what to do.
	for u, want := range map[string]string{
		"redis://user:pa/ss@h:6379/0":   "/ as %2F",
		"redis://:pa%zz@h:6379":         "%25",
		"redis://h:70000":               "from 1 to 65535",
		"redis://h:6379/x":              "database",
		"redis://h:6379?dial_timeout=x": "dial_timeout",
		"user:pw@h:6379":                "scheme",
	} {
		if _, err := ParseRedisURL(u); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseRedisURL(%q) = %v; want it to say %q", u, err, want)
		}
	}
}

type markedURL struct{ url, user, password string }

// malformedRedisURLs returns URLs that go-redis or net/url refuse, each
// with a user and a password made of markers around a character that
// breaks the URL.
func malformedRedisURLs() []markedURL {
	const user = "Uq7Zx"
	var out []markedURL
	for _, sep := range []string{"", "/", "?", "#", "@", "%", "%zz", " ", "[", "]", ":", "\x01", "\\", "\"", "%2"} {
		pw := "Pw9X" + sep + "k3Vj"
		for _, form := range []string{
			"redis://%[1]s:%[2]s@h:6379/0", "redis://:%[2]s@h:6379", "redis://%[1]s:%[2]s/", "redis://%[1]s:%[2]s",
			"rediss://%[1]s:%[2]s@h:port", "redis://%[1]s:%[2]s@h:6379/x%[2]s", "redis://%[1]s:%[2]s@h:6379/0?dial_timeout=%[2]s",
			"%[1]s:%[2]s@h:6379", "redis://%[1]s:%[2]s@[::1", "unix://%[1]s:%[2]s@", "redis://%[1]s:%[2]s@h:6379?%[2]s=1",
			"http://%[1]s:%[2]s@h", "redis://%[1]s:%[2]s@h:70000", "redis://%[1]s:%[2]s@h:6379/0/%[2]s",
			"redis://%[1]s:%[2]s@h:6379?pool_fifo=%[2]s", "redis://%[1]s:%[2]s@h:6379?db=%[2]s", "redis://%[1]s@h:%[2]s",
			"redis://%[1]s:%[2]s@h%[2]s:6379", "%[2]s", "redis://%[1]s:%[2]s@h:6379/0?client_name=a&%[2]s",
		} {
			out = append(out, markedURL{fmt.Sprintf(form, user, pw), user, pw})
		}
	}
	return out
}

// checkNoUserinfo fails if msg holds any three bytes in a row of user or
// password.
func checkNoUserinfo(t *testing.T, what, msg, user, password string) {
	t.Helper()
	for _, secret := range []string{user, password} {
		for i := 0; i+3 <= len(secret); i++ {
			if strings.Contains(msg, secret[i:i+3]) {
				t.Errorf("%s: the error quotes %q of %q:\n%s", what, secret[i:i+3], secret, msg)
				break
			}
		}
	}
}

// tomlString quotes s as a TOML basic string.
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, "\\u%04x", r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
