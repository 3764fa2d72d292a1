package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Stores the tool drives (-store).
const (
	storeRedis     = "redis"
	storeCluster   = "cluster" // Redis Cluster
	storeEtcd      = "etcd"
	storeZooKeeper = "zookeeper"
)

// consensus is a 3-member etcd cluster or ZooKeeper ensemble, or a Redis
// Cluster of 3 masters, this run starts on free loopback ports (the same
// settings as internal/etcdtest, internal/zktest and internal/redistest),
// or the endpoints given with -endpoints; its members' CPU is read from
// /proc by their pids (none for given endpoints).
type consensus struct {
	kind      string
	endpoints []string // etcd: client URLs; ZooKeeper: host:port
	procs     []*exec.Cmd
}

// section is the replicas' config section naming the store.
func (c *consensus) section() string {
	q := make([]string, len(c.endpoints))
	for i, e := range c.endpoints {
		q[i] = strconv.Quote(e)
	}
	switch c.kind {
	case storeEtcd:
		return fmt.Sprintf("[etcd]\nendpoints = [%s]\n", strings.Join(q, ", "))
	case storeCluster:
		return fmt.Sprintf("[redis]\naddrs = [%s]\ncluster = true\n", strings.Join(q, ", "))
	}
	return fmt.Sprintf("[zookeeper]\nservers = [%s]\n", strings.Join(q, ", "))
}

// cpu is the members' user + system CPU seconds (0 for given endpoints).
func (c *consensus) cpu() float64 {
	var t float64
	for _, p := range c.procs {
		if s, err := readProc(p.Process.Pid); err == nil {
			t += s.CPUSeconds
		}
	}
	return t
}

// rssMB is the members' resident memory summed, in MB.
func (c *consensus) rssMB() float64 {
	var t float64
	for _, p := range c.procs {
		if s, err := readProc(p.Process.Pid); err == nil {
			t += s.RSSMB
		}
	}
	return t
}

// requests counts the requests the members received: ZooKeeper's
// packets received ("mntr"), etcd's gRPC calls started by method
// (/metrics); nil on a Redis Cluster, or where a member does not answer.
func (c *consensus) requests() map[string]int64 {
	m := map[string]int64{}
	for _, e := range c.endpoints {
		switch c.kind {
		case storeZooKeeper:
			for _, line := range strings.Split(fourLetter(e, "mntr"), "\n") {
				if v, ok := strings.CutPrefix(line, "zk_packets_received\t"); ok {
					n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
					m["packets"] += n
				}
			}
		case storeEtcd:
			resp, err := (&http.Client{Timeout: 2 * time.Second}).Get(e + "/metrics")
			if err != nil {
				continue
			}
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				// grpc_server_started_total{grpc_method="Txn",grpc_service="etcdserverpb.KV",grpc_type="unary"} 123
				rest, ok := strings.CutPrefix(sc.Text(), `grpc_server_started_total{grpc_method="`)
				if !ok {
					continue
				}
				method, _, _ := strings.Cut(rest, `"`)
				f := strings.Fields(rest)
				if n, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
					m[method] += int64(n)
				}
			}
			resp.Body.Close()
		}
	}
	if len(m) == 0 {
		return nil
	}
	return m
}

func (c *consensus) stop() {
	for _, p := range c.procs {
		_ = p.Process.Kill()
		_ = p.Wait()
	}
}

// startConsensus starts the store of kind with members members in dir, or
// uses the given endpoints.
func startConsensus(kind string, given []string, members int, dir string) (*consensus, error) {
	if len(given) > 0 {
		return &consensus{kind: kind, endpoints: given}, nil
	}
	var c *consensus
	var err error
	switch kind {
	case storeEtcd:
		c, err = startEtcd(members, dir)
	case storeCluster:
		c, err = startCluster(members, dir)
	default:
		c, err = startZooKeeper(members, dir)
	}
	if err != nil && c != nil {
		c.stop()
	}
	return c, err
}

func freeAddr() (string, error) {
	p, err := freePort()
	return "127.0.0.1:" + strconv.Itoa(p), err
}

func startProc(bin string, args []string, logPath string) (*exec.Cmd, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	return cmd, nil
}

// startEtcd runs an etcd cluster of n members with internal/etcdtest's
// timing (heartbeat 50 ms, election timeout 500 ms) and waits until every
// member reports healthy.
func startEtcd(n int, dir string) (*consensus, error) {
	bin, err := exec.LookPath("etcd")
	if err != nil {
		return nil, fmt.Errorf("-store etcd: %w", err)
	}
	c := &consensus{kind: storeEtcd}
	names := make([]string, n)
	clients := make([]string, n)
	peers := make([]string, n)
	var initial []string
	for i := range n {
		ca, err := freeAddr()
		if err != nil {
			return nil, err
		}
		pa, err := freeAddr()
		if err != nil {
			return nil, err
		}
		names[i], clients[i], peers[i] = "m"+strconv.Itoa(i), "http://"+ca, "http://"+pa
		initial = append(initial, names[i]+"="+peers[i])
	}
	for i := range n {
		mdir := filepath.Join(dir, "etcd-"+names[i])
		args := []string{"--name", names[i], "--data-dir", mdir,
			"--listen-client-urls", clients[i], "--advertise-client-urls", clients[i],
			"--listen-peer-urls", peers[i], "--initial-advertise-peer-urls", peers[i],
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", "slotd-load", "--heartbeat-interval", "50", "--election-timeout", "500",
			"--experimental-enable-lease-checkpoint", "--logger", "zap", "--log-level", "warn"}
		p, err := startProc(bin, args, mdir+".log")
		if err != nil {
			return c, err
		}
		c.procs = append(c.procs, p)
	}
	c.endpoints = clients
	hc := &http.Client{Timeout: time.Second}
	for _, u := range clients {
		deadline := time.Now().Add(30 * time.Second)
		for {
			resp, err := hc.Get(u + "/health")
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if strings.Contains(string(b), `"health":"true"`) {
					break
				}
				err = fmt.Errorf("%s", b)
			}
			if time.Now().After(deadline) {
				return c, fmt.Errorf("etcd member %s not healthy within 30s: %v", u, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return c, nil
}

// zkJar is the ZooKeeper server jar of the Debian package.
const zkJar = "/usr/share/java/zookeeper.jar"

// startZooKeeper runs an ensemble of n members with internal/zktest's
// settings (tick 100 ms, TTL nodes, forceSync=no) and waits until every
// member serves.
func startZooKeeper(n int, dir string) (*consensus, error) {
	java, err := exec.LookPath("java")
	if err == nil {
		_, err = os.Stat(zkJar)
	}
	if err != nil {
		return nil, fmt.Errorf("-store zookeeper: %w", err)
	}
	c := &consensus{kind: storeZooKeeper}
	ports := make([]int, 3*n)
	for i := range ports {
		if ports[i], err = freePort(); err != nil {
			return nil, err
		}
	}
	var peers strings.Builder
	for i := range n {
		if n > 1 {
			fmt.Fprintf(&peers, "server.%d=127.0.0.1:%d:%d\n", i+1, ports[3*i+1], ports[3*i+2])
		}
	}
	for i := range n {
		mdir := filepath.Join(dir, "zk"+strconv.Itoa(i+1))
		data := filepath.Join(mdir, "data")
		if err := os.MkdirAll(data, 0o755); err != nil {
			return c, err
		}
		cfg := fmt.Sprintf("tickTime=100\ninitLimit=20\nsyncLimit=5\ndataDir=%s\nclientPort=%d\nclientPortAddress=127.0.0.1\n"+
			"maxClientCnxns=0\nminSessionTimeout=200\nmaxSessionTimeout=60000\nadmin.enableServer=false\n"+
			"4lw.commands.whitelist=*\nautopurge.purgeInterval=0\nforceSync=no\n%s", data, ports[3*i], peers.String())
		if err := os.WriteFile(filepath.Join(mdir, "zoo.cfg"), []byte(cfg), 0o644); err != nil {
			return c, err
		}
		if err := os.WriteFile(filepath.Join(data, "myid"), []byte(strconv.Itoa(i+1)+"\n"), 0o644); err != nil {
			return c, err
		}
		p, err := startProc(java, []string{"-Xmx192m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
			"-Dzookeeper.extendedTypesEnabled=true", "-Dznode.container.checkIntervalMs=100",
			"-Dzookeeper.admin.enableServer=false", "-Dzookeeper.jmx.log4j.disable=true",
			"-cp", zkJar, "org.apache.zookeeper.server.quorum.QuorumPeerMain", filepath.Join(mdir, "zoo.cfg")},
			filepath.Join(mdir, "server.log"))
		if err != nil {
			return c, err
		}
		c.procs = append(c.procs, p)
		c.endpoints = append(c.endpoints, "127.0.0.1:"+strconv.Itoa(ports[3*i]))
	}
	for _, addr := range c.endpoints {
		deadline := time.Now().Add(60 * time.Second)
		for zkMode(addr) == "" {
			if time.Now().After(deadline) {
				return c, fmt.Errorf("zookeeper member %s not serving within 60s", addr)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return c, nil
}

// zkMode asks a ZooKeeper member "srvr" and returns its Mode line's value
// (leader, follower, standalone), or "" if it does not serve yet.
func zkMode(addr string) string {
	for _, line := range strings.Split(fourLetter(addr, "srvr"), "\n") {
		if mode, ok := strings.CutPrefix(line, "Mode: "); ok {
			return mode
		}
	}
	return ""
}

// fourLetter sends a ZooKeeper member a four-letter command and returns
// its answer ("" if it does not answer within 2 s).
func fourLetter(addr, cmd string) string {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return ""
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := conn.Write([]byte(cmd)); err != nil {
		return ""
	}
	b, _ := io.ReadAll(conn)
	return string(b)
}

// startCluster runs a Redis Cluster of n masters (no replicas), as
// internal/redistest's StartCluster does, and waits until every node
// reports cluster_state:ok.
func startCluster(n int, dir string) (*consensus, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("-store cluster: %w", err)
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		return nil, fmt.Errorf("-store cluster: %w", err)
	}
	c := &consensus{kind: storeCluster}
	for i := range n {
		port, err := freePort()
		if err != nil {
			return c, err
		}
		bus, err := freePort()
		if err != nil {
			return c, err
		}
		ndir := filepath.Join(dir, "redis"+strconv.Itoa(i+1))
		if err := os.MkdirAll(ndir, 0o755); err != nil {
			return c, err
		}
		p, err := startProc(bin, []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
			"--dir", ndir, "--loglevel", "warning", "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-port", strconv.Itoa(bus), "--cluster-node-timeout", "5000"}, ndir+".log")
		if err != nil {
			return c, err
		}
		c.procs = append(c.procs, p)
		c.endpoints = append(c.endpoints, "127.0.0.1:"+strconv.Itoa(port))
	}
	for _, addr := range c.endpoints {
		if err := awaitRedis(cli, addr, "PING", "PONG"); err != nil {
			return c, err
		}
	}
	args := append(append([]string{"--cluster", "create"}, c.endpoints...), "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		return c, fmt.Errorf("redis-cli --cluster create: %w: %s", err, out)
	}
	for _, addr := range c.endpoints {
		if err := awaitRedis(cli, addr, "CLUSTER INFO", "cluster_state:ok"); err != nil {
			return c, err
		}
	}
	return c, nil
}

// awaitRedis asks the server at addr cmd through redis-cli until the
// answer contains want, for 30 s at most.
func awaitRedis(cli, addr, cmd, want string) error {
	host, port, _ := net.SplitHostPort(addr)
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := exec.Command(cli, append([]string{"-h", host, "-p", port}, strings.Fields(cmd)...)...).CombinedOutput()
		if err == nil && strings.Contains(string(out), want) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server %s: %s did not answer %s within 30s: %v %s", addr, cmd, want, err, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
