package redistest

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// setupTimeout bounds each wait while a topology forms. The machine may be
// loaded; these are deadlines, not expectations.
const setupTimeout = 60 * time.Second

// await polls cond every 50ms until it returns "" (done) or the deadline
// passes, then fails the test with cond's last answer.
func await(t testing.TB, what string, timeout time.Duration, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		why := cond()
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: %s not within %v: %s", what, timeout, why)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// info returns INFO section of the server at addr as key -> value.
func info(addr, section string) (map[string]string, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := c.Info(ctx, section).Result()
	if err != nil {
		return nil, err
	}
	return parseInfo(s), nil
}

func parseInfo(s string) map[string]string {
	out := map[string]string{}
	for line := range strings.Lines(s) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			out[k] = v
		}
	}
	return out
}

// Cluster is a Redis Cluster of masters without replicas, on loopback.
type Cluster struct {
	t     testing.TB
	Nodes []*Server
}

// StartCluster runs n (>= 3) cluster-enabled redis-servers, joins them with
// `redis-cli --cluster create` (the hash slots spread evenly over the
// masters, no replicas) and waits until every node reports cluster_state:ok
// and knows all n masters. The servers stop at cleanup.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	return startCluster(t, n, nil)
}

// StartClusterTLS is StartCluster with every node speaking only TLS, on its
// client port and on the cluster bus, with the certificates of x; Client
// trusts the CA and presents the client certificate.
func StartClusterTLS(t testing.TB, n int, x *TLS) *Cluster {
	t.Helper()
	return startCluster(t, n, x)
}

func startCluster(t testing.TB, n int, x *TLS) *Cluster {
	t.Helper()
	if n < 3 {
		t.Fatalf("redistest: a Redis Cluster needs at least 3 masters, not %d", n)
	}
	cli := lookPath(t, "redis-cli")
	c := &Cluster{t: t}
	addrs := make([]string, 0, n)
	for range n {
		// The cluster bus gets a free port of its own: the default,
		// port+10000, may be taken or out of range.
		args := []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-port", strconv.Itoa(FreePort(t)), "--cluster-node-timeout", "5000"}
		var s *Server
		if x != nil {
			s = StartTLS(t, x, append(args, "--tls-cluster", "yes", "--tls-replication", "yes")...)
		} else {
			s = Start(t, args...)
		}
		c.Nodes = append(c.Nodes, s)
		addrs = append(addrs, s.Addr)
	}
	args := append(append([]string{"--cluster", "create"}, addrs...), "--cluster-replicas", "0", "--cluster-yes")
	if x != nil {
		args = append(args, "--tls", "--cacert", x.CAFile, "--cert", x.ClientCert, "--key", x.ClientKey)
	}
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redistest: redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	for _, s := range c.Nodes {
		await(t, "cluster_state:ok on "+s.Addr, setupTimeout, func() string {
			ci, err := clusterInfo(s.Addr, s.tls)
			switch {
			case err != nil:
				return err.Error()
			case ci["cluster_state"] != "ok":
				return "cluster_state:" + ci["cluster_state"]
			case ci["cluster_known_nodes"] != strconv.Itoa(n) || ci["cluster_size"] != strconv.Itoa(n):
				return fmt.Sprintf("knows %s nodes, %s masters with slots", ci["cluster_known_nodes"], ci["cluster_size"])
			}
			return ""
		})
	}
	return c
}

func clusterInfo(addr string, tlsConf *tls.Config) (map[string]string, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second, TLSConfig: tlsConf})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := c.ClusterInfo(ctx).Result()
	if err != nil {
		return nil, err
	}
	return parseInfo(s), nil
}

// Addrs are the nodes' host:port.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		out[i] = s.Addr
	}
	return out
}

// Client returns a cluster client seeded with every node, closed at cleanup.
func (c *Cluster) Client() *redis.ClusterClient {
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), ContextTimeoutEnabled: true, TLSConfig: c.Nodes[0].tls})
	c.t.Cleanup(func() { rdb.Close() })
	return rdb
}

// StartReplica runs a redis-server replicating master, with extra
// arguments, and waits until its link to the master is up. It stops at
// cleanup.
func StartReplica(t testing.TB, master *Server, extra ...string) *Server {
	t.Helper()
	// The first sync would otherwise wait 5s for more replicas to join it.
	mc := redis.NewClient(&redis.Options{Addr: master.Addr})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	err := mc.ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err()
	cancel()
	defer mc.Close()
	if err != nil {
		t.Fatalf("redistest: config set on master %s: %v", master.Addr, err)
	}
	s := Start(t, append([]string{"--replicaof", "127.0.0.1", strconv.Itoa(master.Port), "--repl-diskless-sync-delay", "0"}, extra...)...)
	await(t, "replica "+s.Addr+" linked to "+master.Addr, setupTimeout, func() string {
		in, err := info(s.Addr, "replication")
		if err != nil {
			return err.Error()
		}
		if in["master_link_status"] != "up" {
			return "master_link_status:" + in["master_link_status"]
		}
		// A replica fresh from a diskless sync is online on the master a
		// moment before WAIT counts it (its acknowledgements start with its
		// first periodic REPLCONF ACK): wait until a write on the master is
		// acknowledged by every replica it has, so that tests of WAIT start
		// from a replica that answers.
		mi, err := info(master.Addr, "replication")
		if err != nil {
			return err.Error()
		}
		n, _ := strconv.Atoi(mi["connected_slaves"])
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		conn := mc.Conn()
		defer conn.Close()
		if err := conn.Set(ctx, "redistest:replica-ack", s.Addr, time.Second).Err(); err != nil {
			return err.Error()
		}
		acks, err := conn.Wait(ctx, n, 100*time.Millisecond).Result()
		if err != nil {
			return err.Error()
		}
		if int(acks) < n {
			return "WAIT acknowledged by " + strconv.Itoa(int(acks)) + " of " + strconv.Itoa(n) + " replicas"
		}
		conn.Del(ctx, "redistest:replica-ack")
		return ""
	})
	return s
}

// Sentinel is a master, one replica and three Sentinels watching them under
// the name MasterName, with a quorum of 2.
type Sentinel struct {
	t          testing.TB
	MasterName string
	Master     *Server // the master at start; after a failover, see MasterAddr
	Replica    *Server
	Sentinels  []*Server
}

// Sentinel timings: short, so that a test's failover takes seconds.
const (
	DownAfter       = time.Second
	FailoverTimeout = 10 * time.Second
)

// StartSentinel runs a master and a replica of it, both with the extra
// arguments, and three Sentinels (quorum 2, down-after-milliseconds
// DownAfter), and waits until every Sentinel sees the master, the replica
// and the two other Sentinels. Everything stops at cleanup.
func StartSentinel(t testing.TB, extra ...string) *Sentinel {
	t.Helper()
	bin := lookPath(t, "redis-server")
	master := Start(t, append([]string{"--repl-diskless-sync-delay", "0"}, extra...)...)
	s := &Sentinel{t: t, MasterName: "slotdmaster", Master: master, Replica: StartReplica(t, master, extra...)}
	for range 3 {
		port := FreePort(t)
		dir := t.TempDir()
		conf := filepath.Join(dir, "sentinel.conf")
		// Sentinel rewrites its config file, so each gets its own.
		body := fmt.Sprintf(`port %d
bind 127.0.0.1
dir %s
sentinel monitor %s 127.0.0.1 %d 2
sentinel down-after-milliseconds %s %d
sentinel failover-timeout %s %d
sentinel parallel-syncs %s 1
`, port, dir, s.MasterName, master.Port, s.MasterName, DownAfter.Milliseconds(), s.MasterName, FailoverTimeout.Milliseconds(), s.MasterName)
		if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		sen := &Server{t: t, bin: bin, logPath: filepath.Join(dir, "sentinel.log"), Port: port,
			Addr: "127.0.0.1:" + strconv.Itoa(port), args: []string{conf, "--sentinel"}}
		sen.start()
		t.Cleanup(sen.Stop)
		s.Sentinels = append(s.Sentinels, sen)
	}
	for _, sen := range s.Sentinels {
		await(t, "sentinel "+sen.Addr+" sees the master, its replica and 2 other sentinels", setupTimeout, func() string {
			m, err := s.sentinelMaster(sen.Addr)
			if err != nil {
				return err.Error()
			}
			if m["num-slaves"] != "1" || m["num-other-sentinels"] != "2" || strings.Contains(m["flags"], "down") {
				return fmt.Sprintf("flags %s, replicas %s, other sentinels %s", m["flags"], m["num-slaves"], m["num-other-sentinels"])
			}
			return ""
		})
	}
	return s
}

func (s *Sentinel) sentinelMaster(addr string) (map[string]string, error) {
	c := redis.NewSentinelClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return c.Master(ctx, s.MasterName).Result()
}

// Addrs are the Sentinels' host:port.
func (s *Sentinel) Addrs() []string {
	out := make([]string, len(s.Sentinels))
	for i, sen := range s.Sentinels {
		out[i] = sen.Addr
	}
	return out
}

// MasterAddr is the master's host:port as the first Sentinel that answers
// sees it.
func (s *Sentinel) MasterAddr() (string, error) {
	var last error
	for _, sen := range s.Sentinels {
		if sen.cmd == nil {
			continue
		}
		c := redis.NewSentinelClient(&redis.Options{Addr: sen.Addr, MaxRetries: -1, DialTimeout: time.Second})
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		hp, err := c.GetMasterAddrByName(ctx, s.MasterName).Result()
		cancel()
		c.Close()
		if err == nil && len(hp) == 2 {
			return hp[0] + ":" + hp[1], nil
		}
		last = err
	}
	return "", fmt.Errorf("no sentinel names the master: %v", last)
}

// Client returns a Sentinel failover client for the master, closed at
// cleanup.
func (s *Sentinel) Client() *redis.Client {
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: s.MasterName, SentinelAddrs: s.Addrs(),
		ContextTimeoutEnabled: true})
	s.t.Cleanup(func() { rdb.Close() })
	return rdb
}

// Failover asks a Sentinel to fail over now (SENTINEL FAILOVER), without
// waiting for the master to be seen down.
func (s *Sentinel) Failover() {
	s.t.Helper()
	c := redis.NewSentinelClient(&redis.Options{Addr: s.Sentinels[0].Addr})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Failover(ctx, s.MasterName).Err(); err != nil {
		s.t.Fatalf("redistest: sentinel failover %s: %v", s.MasterName, err)
	}
}

// AwaitMaster waits until every running Sentinel names addr as the master
// and addr answers as a master.
func (s *Sentinel) AwaitMaster(addr string, timeout time.Duration) {
	s.t.Helper()
	await(s.t, "sentinels to name "+addr+" the master", timeout, func() string {
		for _, sen := range s.Sentinels {
			if sen.cmd == nil {
				continue // stopped by the test
			}
			m, err := s.sentinelMaster(sen.Addr)
			if err != nil {
				return err.Error()
			}
			if got := m["ip"] + ":" + m["port"]; got != addr {
				return fmt.Sprintf("sentinel %s names %s", sen.Addr, got)
			}
		}
		in, err := info(addr, "replication")
		if err != nil {
			return err.Error()
		}
		if in["role"] != "master" {
			return addr + " has role " + in["role"]
		}
		return ""
	})
}

func lookPath(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s not found under CI (.ci/run installs it): %v", name, err)
		}
		t.Skipf("%s not installed (apt-get install -y redis-server): %v", name, err)
	}
	return p
}
