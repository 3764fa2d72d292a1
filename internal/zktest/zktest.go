// Package zktest starts real ZooKeeper ensembles for tests: members of
// Debian's zookeeper package (QuorumPeerMain under java) on free loopback
// ports, each with its own config and data directory in the test's temp
// dir, stopped by pid when the test ends.
//
// Members run with TTL nodes enabled (zookeeper.extendedTypesEnabled), the
// container reaper checking every 100ms, the admin server off, every
// four-letter command allowed, a short tick (100ms) so that elections and
// session expiries take a second or two, not tens, and forceSync=no: the
// transaction log is written but not fsynced, which loses nothing when a
// member's process is killed (the page cache outlives it), only when the
// machine does — as redistest's servers run without persistence.
//
// When ZooKeeper or java is not installed the test is skipped — except
// under CI (CI=true), where a missing server is a failure, never a skip.
package zktest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/testport"
	"github.com/slotd/slotd/internal/testshared"
)

// Jar is the ZooKeeper server jar of the Debian package; its manifest
// names the jars it needs.
const Jar = "/usr/share/java/zookeeper.jar"

// logBinding is slf4j's simple logger in Debian's libslf4j-java; a
// missing jar on the class path is ignored.
const logBinding = "/usr/share/java/slf4j-simple.jar"

// Tick is the members' tickTime: sessions may time out between 2 and 600
// ticks (200ms to 60s).
const Tick = 100 * time.Millisecond

// Ensemble is a running ZooKeeper ensemble.
type Ensemble struct {
	t       testing.TB
	Members []*Member
}

// Member is one ZooKeeper server process of an ensemble.
type Member struct {
	t      testing.TB
	ID     int    // myid, from 1
	Addr   string // client address, 127.0.0.1:port
	dir    string
	java   string
	logf   string
	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// Java is the path of java, after checking that ZooKeeper is installed.
// Where either is missing the test is skipped, except under CI=true, where
// that fails it.
func Java(t testing.TB) string {
	t.Helper()
	java, err := exec.LookPath("java")
	if err == nil {
		_, err = os.Stat(Jar)
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("zookeeper or java not found under CI (.ci/run installs the zookeeper package): %v", err)
		}
		t.Skipf("zookeeper not installed (apt-get install -y zookeeper): %v", err)
	}
	return java
}

// Start runs an ensemble of n members (1 for a standalone server) and
// waits until every member serves. An ensemble whose members do not all
// serve within startWait (a port taken between FreePort and the JVM's
// bind, an election that loops on a starved machine) is stopped, its
// members' log tails logged, and started once more on new ports.
func Start(t testing.TB, n int) *Ensemble {
	t.Helper()
	java := Java(t)
	for try := 1; ; try++ {
		e := start(t, java, n)
		late := e.waitServing(startWait)
		if late == nil {
			t.Cleanup(e.Stop)
			return e
		}
		e.Stop()
		if try == 2 {
			t.Fatalf("zktest: member %d on %s not serving within %v, twice; its log ends:\n%s", late.ID, late.Addr, startWait, late.logTail())
		}
		t.Logf("zktest: member %d on %s not serving within %v; starting the ensemble again on new ports. Its log ends:\n%s",
			late.ID, late.Addr, startWait, late.logTail())
	}
}

// shared holds the ensembles Shared started, by size, until StopShared.
var shared = testshared.Servers[*Ensemble]{Start: Start}

// Shared returns the client addresses of an ensemble of n members shared
// by the package's tests, started by the first test that asks (its start's
// failure is that test's) and stopped by StopShared, which the package's
// TestMain calls after its tests. It is for tests that only read and
// write, each under a root of its own (zklock.Options.Root): one that
// stops, stalls or cuts off a member starts an ensemble of its own. A
// three-member ensemble costs about 2 CPU-seconds and 1.5 s to start.
func Shared(t testing.TB, n int) []string {
	t.Helper()
	return shared.Get(t, n).Servers()
}

// StopShared stops the ensembles Shared started and removes their data.
func StopShared() { shared.End() }

// startWait bounds a fresh ensemble's start: JVMs, an election, the
// followers' sync; seconds alone, longer on a loaded machine.
const startWait = 45 * time.Second

// start writes the configs of a fresh n-member ensemble and starts it.
func start(t testing.TB, java string, n int) *Ensemble {
	t.Helper()
	root := t.TempDir()
	ports := make([]int, 3*n)
	for i := range ports {
		ports[i] = FreePort(t)
	}
	e := &Ensemble{t: t}
	var peers strings.Builder
	for i := range n {
		if n > 1 {
			fmt.Fprintf(&peers, "server.%d=127.0.0.1:%d:%d\n", i+1, ports[3*i+1], ports[3*i+2])
		}
	}
	for i := range n {
		m := &Member{t: t, ID: i + 1, Addr: "127.0.0.1:" + strconv.Itoa(ports[3*i]), java: java,
			dir: filepath.Join(root, "zk"+strconv.Itoa(i+1))}
		m.logf = filepath.Join(m.dir, "server.log")
		if err := os.MkdirAll(filepath.Join(m.dir, "data"), 0o755); err != nil {
			t.Fatal(err)
		}
		// initLimit (ticks) bounds a follower's first sync with a new
		// leader: generous, since a JVM on a starved machine is slow to
		// start and the limit costs nothing when met; syncLimit, how far a
		// follower may lag before the leader drops it, stays short, as
		// the tests of a frozen member need.
		cfg := fmt.Sprintf("tickTime=%d\ninitLimit=100\nsyncLimit=5\ndataDir=%s\nclientPort=%d\nclientPortAddress=127.0.0.1\n"+
			"maxClientCnxns=0\nminSessionTimeout=%d\nmaxSessionTimeout=%d\nadmin.enableServer=false\n"+
			"4lw.commands.whitelist=*\nautopurge.purgeInterval=0\nforceSync=no\n%s",
			Tick.Milliseconds(), filepath.Join(m.dir, "data"), ports[3*i],
			2*Tick.Milliseconds(), 600*Tick.Milliseconds(), peers.String())
		if err := os.WriteFile(filepath.Join(m.dir, "zoo.cfg"), []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(m.dir, "data", "myid"), []byte(strconv.Itoa(i+1)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		e.Members = append(e.Members, m)
	}
	for _, m := range e.Members {
		m.Start()
	}
	return e
}

// waitServing waits up to d for every member to serve; it returns the
// first that did not, or nil.
func (e *Ensemble) waitServing(d time.Duration) *Member {
	deadline := time.Now().Add(d)
	for _, m := range e.Members {
		for m.Mode() == "" {
			if time.Now().After(deadline) {
				return m
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

// Servers lists the members' client addresses.
func (e *Ensemble) Servers() []string {
	out := make([]string, len(e.Members))
	for i, m := range e.Members {
		out[i] = m.Addr
	}
	return out
}

// Stop kills every member.
func (e *Ensemble) Stop() {
	for _, m := range e.Members {
		m.Stop()
	}
}

// Leader is the member that reports itself leader (nil if none does now).
func (e *Ensemble) Leader() *Member {
	for _, m := range e.Members {
		if m.Mode() == "leader" || m.Mode() == "standalone" {
			return m
		}
	}
	return nil
}

// WaitLeader waits up to d for a member to lead and returns it.
func (e *Ensemble) WaitLeader(d time.Duration) *Member {
	e.t.Helper()
	deadline := time.Now().Add(d)
	for {
		if l := e.Leader(); l != nil {
			return l
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("zktest: no leader within %v", d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Start starts the member's process (again, after Stop, on its data).
func (m *Member) Start() {
	m.t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd != nil {
		return
	}
	cmd := exec.Command(m.java, "-Xmx192m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
		"-Dzookeeper.extendedTypesEnabled=true",
		"-Dznode.container.checkIntervalMs=100",
		"-Dzookeeper.admin.enableServer=false",
		"-Dzookeeper.jmx.log4j.disable=true",
		// slf4j-simple (beside slf4j-api in Debian's libslf4j-java, which
		// the server needs) writes the server's log to stderr, into
		// server.log: without a binding slf4j drops it, and a member that
		// does not serve would say nothing of why.
		"-Dorg.slf4j.simpleLogger.showDateTime=true",
		"-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
		"-cp", Jar+":"+logBinding, "org.apache.zookeeper.server.quorum.QuorumPeerMain", filepath.Join(m.dir, "zoo.cfg"))
	logf, err := os.OpenFile(m.logf, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		m.t.Fatalf("zktest: %v", err)
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		m.t.Fatalf("zktest: start member %d: %v", m.ID, err)
	}
	m.cmd, m.exited = cmd, make(chan struct{})
	go func(c *exec.Cmd, done chan struct{}) { _ = c.Wait(); close(done) }(cmd, m.exited)
}

// Stop kills the member by its pid and waits for it. Safe to call twice.
func (m *Member) Stop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil {
		return
	}
	_ = m.cmd.Process.Kill()
	<-m.exited
	m.cmd = nil
}

// Running reports whether the member's process was started and not stopped.
func (m *Member) Running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cmd != nil
}

// PID is the member's process id (0 when stopped).
func (m *Member) PID() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil {
		return 0
	}
	return m.cmd.Process.Pid
}

// Signal sends sig to the member (SIGSTOP/SIGCONT to stall it).
func (m *Member) Signal(sig syscall.Signal) {
	m.t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil {
		m.t.Fatalf("zktest: signal %v to stopped member %d", sig, m.ID)
	}
	if err := m.cmd.Process.Signal(sig); err != nil {
		m.t.Fatalf("zktest: signal %v: %v", sig, err)
	}
}

// Command sends a four-letter command and returns the answer ("" if the
// member does not answer).
func (m *Member) Command(cmd string) string {
	c, err := net.DialTimeout("tcp", m.Addr, 200*time.Millisecond)
	if err != nil {
		return ""
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte(cmd)); err != nil {
		return ""
	}
	var b strings.Builder
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		b.WriteString(line)
		if err != nil {
			return b.String()
		}
	}
}

// Mode is "leader", "follower" or "standalone" while the member serves,
// and "" while it does not (down, or without a quorum).
func (m *Member) Mode() string {
	for _, line := range strings.Split(m.Command("srvr"), "\n") {
		if v, ok := strings.CutPrefix(line, "Mode: "); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// logTail is the last 4000 bytes of the member's log.
func (m *Member) logTail() []byte {
	log, _ := os.ReadFile(m.logf)
	if len(log) > 4000 {
		log = log[len(log)-4000:]
	}
	return log
}

// FreePort returns a TCP port free on 127.0.0.1 at the time of the call.
func FreePort(t testing.TB) int {
	t.Helper()
	return testport.Free(t)
}
