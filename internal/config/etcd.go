package config

import (
	"crypto/tls"
	"net/url"
	"strconv"
	"strings"
)

// EtcdOptions is [etcd]: slots on an etcd cluster (lock/etcdlock) instead
// of Redis. Endpoints is empty when the section is absent.
type EtcdOptions struct {
	Endpoints []string // [etcd] endpoints: the members' client URLs, http:// or https://
	Username  string   // [etcd] username: etcd's auth (with password)
	Password  string   // [etcd] password
	// TLSConfig is set when the endpoints are https://: the CA to trust and
	// the client certificate from [etcd] tls_ca_file, tls_cert_file and
	// tls_key_file, read at load (the system's roots when none is set).
	TLSConfig *tls.Config
}

// ModeEtcd is the store mode of an [etcd] configuration.
const ModeEtcd = "etcd"

var etcdKeys = []string{"endpoints", "username", "password", "prefix", "tls_ca_file", "tls_cert_file", "tls_key_file"}

// UsesEtcd reports whether the slots live on an etcd cluster.
func (c *Config) UsesEtcd() bool { return len(c.Etcd.Endpoints) > 0 }

// readEtcd reads [etcd], after [redis] (with which it is exclusive).
func (c *Config) readEtcd(t table) {
	if t.m == nil {
		return
	}
	e := &c.Etcd
	var https, plain bool
	switch v := t.m["endpoints"].(type) {
	case nil:
		t.errorf("endpoints", "missing: list the members' client URLs, endpoints = [\"http://etcd1:2379\", \"http://etcd2:2379\", \"http://etcd3:2379\"]")
	case []any:
		if len(v) == 0 {
			t.errorf("endpoints", "empty: list the members' client URLs")
		}
		for i, x := range v {
			s, ok := x.(string)
			u, err := url.Parse(s)
			if !ok || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
				(u.Path != "" && u.Path != "/") || u.RawQuery != "" || !validPort(u.Port()) {
				t.errorf("endpoints", "item %d is not a client URL such as \"http://etcd1:2379\" (http or https, host and port, no user, path or query)", i+1)
				continue
			}
			https, plain = https || u.Scheme == "https", plain || u.Scheme == "http"
			e.Endpoints = append(e.Endpoints, strings.TrimSuffix(s, "/"))
		}
	default:
		t.errorf("endpoints", "must be an array of client URLs, not %s", tomlType(v))
	}
	if https && plain {
		t.errorf("endpoints", "mixes http:// and https://: use one scheme for every member")
	}
	if v, ok := t.str("username"); ok {
		if v == "" || strings.Contains(v, ":") {
			t.errorf("username", "must be non-empty and hold no colon")
		}
		e.Username = v
	}
	if v, ok := t.str("password"); ok {
		e.Password = v
	}
	if (e.Username == "") != (e.Password == "") {
		t.errorf("username", "etcd auth needs both username and password")
	}
	if v, ok := t.str("prefix"); ok {
		switch {
		case v == "":
			t.errorf("prefix", "must not be empty")
		case strings.ContainsAny(v, "{}") || strings.IndexFunc(v, badNameRune) >= 0:
			t.errorf("prefix", "%q must not contain braces (they delimit a slot in slotd's keys), whitespace or control characters", v)
		default:
			c.Prefix = v
		}
	}
	ca, _ := t.str("tls_ca_file")
	cert, _ := t.str("tls_cert_file")
	key, _ := t.str("tls_key_file")
	switch {
	case https:
		e.TLSConfig = tlsFiles(t, ca, cert, key)
	case ca != "" || cert != "" || key != "":
		for _, k := range []string{"tls_ca_file", "tls_cert_file", "tls_key_file"} {
			if t.has(k) {
				t.errorf(k, "needs TLS: https:// endpoints")
			}
		}
	}
	if c.RedisMode() != ModeEmbedded {
		t.errorf("endpoints", "[etcd] and [redis] url, addrs or redlock are exclusive: slots live in one store")
	}
}

func validPort(p string) bool {
	n, err := strconv.Atoi(p)
	return err == nil && n >= 1 && n <= 65535
}
