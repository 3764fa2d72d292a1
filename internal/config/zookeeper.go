package config

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// ZooKeeperOptions is [zookeeper]: slots on a ZooKeeper ensemble
// (lock/zklock) instead of Redis. Servers is empty when the section is
// absent.
type ZooKeeperOptions struct {
	Servers []string // [zookeeper] servers: host:port of each member
	// SessionTimeout is [zookeeper] session_timeout: how long the ensemble
	// keeps a silent replica's session, and with it its claims. It must be
	// at least every task's lease (the watchdog must stop a task before its
	// session can expire); default the longest lease.
	SessionTimeout time.Duration
	Root           string // [zookeeper] root: the path of slotd's nodes; default "/slotd"
	Username       string // [zookeeper] username: digest auth (with password); nodes are then the user's only
	Password       string // [zookeeper] password
}

// ModeZooKeeper is the store mode of a [zookeeper] configuration.
const ModeZooKeeper = "zookeeper"

// DefaultZooKeeperRoot is [zookeeper] root's default.
const DefaultZooKeeperRoot = "/slotd"

var zookeeperKeys = []string{"servers", "session_timeout", "root", "username", "password"}

// UsesZooKeeper reports whether the slots live on a ZooKeeper ensemble.
func (c *Config) UsesZooKeeper() bool { return len(c.ZooKeeper.Servers) > 0 }

// readZooKeeper reads [zookeeper], after the tasks (whose leases bound the
// session timeout).
func (c *Config) readZooKeeper(t table) {
	if t.m == nil {
		return
	}
	z := &c.ZooKeeper
	z.Root = DefaultZooKeeperRoot
	switch v := t.m["servers"].(type) {
	case nil:
		t.errorf("servers", "missing: list the ensemble's members, servers = [\"zk1:2181\", \"zk2:2181\", \"zk3:2181\"]")
	case []any:
		if len(v) == 0 {
			t.errorf("servers", "empty: list the ensemble's members")
		}
		for i, e := range v {
			s, ok := e.(string)
			host, port, err := net.SplitHostPort(s)
			if ok && err == nil {
				if n, perr := strconv.Atoi(port); perr != nil || n < 1 || n > 65535 || host == "" {
					err = fmt.Errorf("bad host or port")
				}
			}
			if !ok || err != nil {
				t.errorf("servers", "item %d (%v) is not host:port", i+1, e)
				continue
			}
			z.Servers = append(z.Servers, s)
		}
	default:
		t.errorf("servers", "must be an array of \"host:port\" strings, not %s", tomlType(v))
	}
	longest, which := time.Duration(0), ""
	for i := range c.Tasks {
		if l := c.Tasks[i].Lease; l > longest {
			longest, which = l, c.Tasks[i].Name
		}
	}
	z.SessionTimeout = longest
	if which == "" {
		z.SessionTimeout = DefaultLease
	}
	if d, ok := t.positive("session_timeout"); ok {
		z.SessionTimeout = d
		if d < longest && which != "" {
			t.errorf("session_timeout", "%v is shorter than task %q's lease %v: a replica cut off from the ensemble must stop its task before its session (and claim) can expire; raise session_timeout or shorten the lease", d, which, longest)
		}
	}
	if v, ok := t.str("root"); ok {
		if !strings.HasPrefix(v, "/") || strings.HasSuffix(v, "/") || strings.Contains(v, "//") {
			t.errorf("root", "%q: want an absolute ZooKeeper path such as \"/slotd\" (no trailing slash)", v)
		} else {
			z.Root = v
		}
	}
	if v, ok := t.str("username"); ok {
		if v == "" || strings.Contains(v, ":") {
			t.errorf("username", "must be non-empty and hold no colon")
		}
		z.Username = v
	}
	if v, ok := t.str("password"); ok {
		z.Password = v
	}
	if (z.Username == "") != (z.Password == "") {
		t.errorf("username", "digest auth needs both username and password")
	}
	if c.RedisMode() != ModeEmbedded {
		t.errorf("servers", "[zookeeper] and [redis] url, addrs or redlock are exclusive: slots live in one store")
	}
	if c.UsesEtcd() {
		t.errorf("servers", "[zookeeper] and [etcd] are exclusive: slots live in one store")
	}
}
