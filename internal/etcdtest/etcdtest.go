// Package etcdtest starts real etcd clusters for tests: n members of the
// Debian package's etcd on free loopback ports, each with its data in the
// test's temp dir, stopped by pid when the test ends. Members can be killed,
// restarted on their data, and stalled, for fault tests.
//
// When etcd is not installed the test is skipped — except under CI
// (CI=true), where a missing server is a failure, never a silent skip.
package etcdtest

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/testport"
	"github.com/slotd/slotd/internal/testshared"
)

// Timing of the test clusters: a heartbeat of 50 ms and an election
// timeout of 500 ms, so that a leader's loss is noticed within about half
// a second and the shortest lease etcd grants is one second.
const (
	Heartbeat       = 50 * time.Millisecond
	ElectionTimeout = 500 * time.Millisecond
)

// Cluster is a set of etcd members that form one cluster.
type Cluster struct {
	t       testing.TB
	Members []*Member
}

// Member is one etcd process of a Cluster.
type Member struct {
	t         testing.TB
	bin       string
	Name      string
	ClientURL string // http://127.0.0.1:port
	PeerURL   string
	dir       string
	args      []string

	mu  sync.Mutex
	cmd *exec.Cmd
}

// Binary is the path of etcd. Where it is not installed the test is
// skipped, except under CI=true, where that fails it.
func Binary(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("etcd not found under CI (.ci/run installs etcd-server): %v", err)
		}
		t.Skipf("etcd not installed (apt-get install -y etcd-server): %v", err)
	}
	return bin
}

// Start runs a cluster of n members for the test, waits until every member
// reports healthy (a leader is elected), and stops it at cleanup. A port
// taken between its choice and etcd's bind (other tests run beside this
// one) is retried on fresh ports.
func Start(t testing.TB, n int) *Cluster {
	t.Helper()
	return StartWith(t, n)
}

// shared holds the clusters Shared started, by size, until StopShared.
var shared = testshared.Servers[*Cluster]{Start: Start}

// Shared returns the client URLs of a cluster of n members shared by the
// package's tests, started by the first test that asks (its start's
// failure is that test's) and stopped by StopShared, which the package's
// TestMain calls after its tests. It is for tests that only read and
// write, each under a key prefix of its own: one that kills, stalls or
// cuts off a member starts a cluster of its own.
func Shared(t testing.TB, n int) []string {
	t.Helper()
	return shared.Get(t, n).Endpoints()
}

// StopShared stops the clusters Shared started and removes their data.
func StopShared() { shared.End() }

// StartWith is Start with extra flags for every member (a backend quota:
// "--quota-backend-bytes", "1048576").
func StartWith(t testing.TB, n int, flags ...string) *Cluster {
	t.Helper()
	bin := Binary(t)
	for try := 1; ; try++ {
		c, err := start(t, bin, n, flags)
		if err == nil {
			return c
		}
		for _, m := range c.Members {
			m.Stop()
		}
		if try == 3 || !strings.Contains(err.Error(), "address already in use") {
			t.Fatalf("etcdtest: %v", err)
		}
	}
}

func start(t testing.TB, bin string, n int, flags []string) (*Cluster, error) {
	dir := t.TempDir()
	c := &Cluster{t: t}
	var initial []string
	for i := range n {
		m := &Member{
			t: t, bin: bin, Name: "m" + strconv.Itoa(i),
			ClientURL: "http://" + freeAddr(t), PeerURL: "http://" + freeAddr(t),
			dir: fmt.Sprintf("%s/m%d", dir, i),
		}
		c.Members = append(c.Members, m)
		initial = append(initial, m.Name+"="+m.PeerURL)
	}
	for _, m := range c.Members {
		m.args = []string{
			"--name", m.Name, "--data-dir", m.dir + "/data",
			"--listen-client-urls", m.ClientURL, "--advertise-client-urls", m.ClientURL,
			"--listen-peer-urls", m.PeerURL, "--initial-advertise-peer-urls", m.PeerURL,
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", "slotd-test",
			"--heartbeat-interval", strconv.Itoa(int(Heartbeat.Milliseconds())),
			"--election-timeout", strconv.Itoa(int(ElectionTimeout.Milliseconds())),
			"--experimental-enable-lease-checkpoint",
			"--logger", "zap", "--log-level", "warn", "--log-outputs", m.dir + "/etcd.log",
		}
		m.args = append(m.args, flags...)
		if err := os.MkdirAll(m.dir, 0o755); err != nil {
			return c, err
		}
		m.start()
		t.Cleanup(m.Stop)
	}
	for _, m := range c.Members {
		if err := m.healthy(20 * time.Second); err != nil {
			return c, err
		}
	}
	return c, nil
}

// Endpoints are the client URLs of every member.
func (c *Cluster) Endpoints() []string {
	out := make([]string, len(c.Members))
	for i, m := range c.Members {
		out[i] = m.ClientURL
	}
	return out
}

// Leader returns the member that is the leader now (by its /metrics'
// etcd_server_is_leader), waiting up to 10s for one.
func (c *Cluster) Leader() *Member {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, m := range c.Members {
			if m.Running() && m.metric("etcd_server_is_leader") == "1" {
				return m
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatal("etcdtest: no leader within 10s")
	return nil
}

// WaitHealthy waits until every running member reports healthy.
func (c *Cluster) WaitHealthy(within time.Duration) {
	c.t.Helper()
	for _, m := range c.Members {
		if m.Running() {
			m.waitHealthy(within)
		}
	}
}

func (m *Member) start() {
	m.t.Helper()
	cmd := exec.Command(m.bin, m.args...)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		m.t.Fatalf("etcdtest: start etcd %s: %v", m.Name, err)
	}
	m.mu.Lock()
	m.cmd = cmd
	m.mu.Unlock()
}

// Running reports whether the member's process is up (not killed).
func (m *Member) Running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cmd != nil
}

// PID is the member's process id.
func (m *Member) PID() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cmd.Process.Pid
}

// Stop kills the member by its pid and waits for it. Safe to call twice.
func (m *Member) Stop() {
	m.mu.Lock()
	cmd := m.cmd
	m.cmd = nil
	m.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
}

// Restart starts a stopped member again on its data.
func (m *Member) Restart() {
	m.t.Helper()
	m.Stop()
	m.start()
}

// Signal sends sig to the member (SIGSTOP/SIGCONT to stall it).
func (m *Member) Signal(sig syscall.Signal) {
	m.t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.cmd.Process.Signal(sig); err != nil {
		m.t.Fatalf("etcdtest: signal %v to %s: %v", sig, m.Name, err)
	}
}

// Log is the member's own log so far, for a failing test's message.
func (m *Member) Log() string {
	b, _ := os.ReadFile(m.dir + "/etcd.log")
	return string(b)
}

var httpClient = &http.Client{Timeout: time.Second}

func (m *Member) waitHealthy(within time.Duration) {
	m.t.Helper()
	if err := m.healthy(within); err != nil {
		m.t.Fatalf("etcdtest: %v", err)
	}
}

// healthy waits until the member reports healthy; the error carries its
// log.
func (m *Member) healthy(within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		resp, err := httpClient.Get(m.ClientURL + "/health")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.Contains(string(b), `"health":"true"`) {
				return nil
			}
		}
		if log := m.Log(); time.Now().After(deadline) || strings.Contains(log, "address already in use") {
			return fmt.Errorf("etcd %s on %s not healthy within %v; its log:\n%s", m.Name, m.ClientURL, within, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// metric reads one unlabelled gauge from the member's /metrics ("" if the
// member does not answer).
func (m *Member) metric(name string) string {
	resp, err := httpClient.Get(m.ClientURL + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// freeAddr returns a host:port on 127.0.0.1 free at the time of the call.
func freeAddr(t testing.TB) string {
	t.Helper()
	return "127.0.0.1:" + strconv.Itoa(testport.Free(t))
}
