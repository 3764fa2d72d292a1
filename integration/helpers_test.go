package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/internal/redistest"
)

// slotdBin is the binary TestMain built.
var slotdBin string

// binDir holds the binaries built for the tests: slotd, and those built
// by built.
var binDir string

// builds are the binaries built, by the arguments of go build.
var builds sync.Map // string -> *build

type build struct {
	once sync.Once
	bin  string
	err  error
	out  []byte
}

// built returns a binary of pkg (a path from the module root) built with
// flags, building it once for every test that asks: parallel tests that
// each linked their own copy of one race-instrumented binary spent tens
// of seconds doing so, two at a time.
func built(t *testing.T, pkg string, flags ...string) string {
	t.Helper()
	key := strings.Join(append([]string{pkg}, flags...), " ")
	v, _ := builds.LoadOrStore(key, &build{})
	b := v.(*build)
	b.once.Do(func() {
		dir, err := os.MkdirTemp(binDir, "build-")
		if err != nil {
			b.err = err
			return
		}
		b.bin = filepath.Join(dir, filepath.Base(pkg))
		cmd := exec.Command("go", append(append([]string{"build"}, flags...), "-o", b.bin, pkg)...)
		cmd.Dir = ".."
		b.out, b.err = cmd.CombinedOutput()
	})
	if b.err != nil {
		t.Fatalf("go build %s: %v\n%s", key, b.err, b.out)
	}
	return b.bin
}

func TestMain(m *testing.M) {
	// Run under nohup, the test would pass SIGHUP's ignored disposition
	// to every daemon it starts, and a daemon started so does not reload
	// on SIGHUP (cli.hangups, as documented): the SIGHUP tests would fail
	// for the harness's sake. A signal this process handles is reset to
	// its default in the children it starts.
	if signal.Ignored(syscall.SIGHUP) {
		signal.Notify(make(chan os.Signal, 1), syscall.SIGHUP)
	}
	os.Exit(runTests(m))
}

// runTests builds slotd once, from the module root, and runs the tests.
func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "slotd-integration-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	binDir = dir
	slotdBin = filepath.Join(dir, "slotd")
	args := []string{"build", "-o", slotdBin}
	if os.Getenv("SLOTD_IT_RACE") == "1" {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, "./cmd/slotd")...)
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "integration: go %s: %v\n%s", strings.Join(build.Args[1:], " "), err, out)
		return 1
	}
	// The parallel tests are separate slotd processes waiting for
	// one-second slots, mostly asleep: four at a time, not one per core,
	// unless -parallel says otherwise.
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		if err := flag.Set("test.parallel", strconv.Itoa(max(4, runtime.GOMAXPROCS(0)))); err != nil {
			fmt.Fprintln(os.Stderr, "integration:", err)
			return 1
		}
	}
	return m.Run()
}

// poll is how often awaited conditions are checked.
const poll = 20 * time.Millisecond

// markEnv marks, in its environment, every process a replica starts — the
// daemon and, through it, its tasks — so that cleanup can find the task
// processes a killed daemon leaves behind: exec runs each task in a process
// group of its own, which a signal to the daemon's group does not reach.
const markEnv = "SLOTD_IT_MARK"

// replica is one slotd process, in a process group of its own, with its
// stderr in a file. Cleanup kills it (SIGKILL), reaps it, kills whatever
// task processes it left, and prints the end of its log if the test failed.
type replica struct {
	t       *testing.T
	name    string
	logPath string
	mark    string
	cmd     *exec.Cmd
	exited  chan struct{} // closed once the process has been reaped
}

// startReplica writes config to a file of its own and runs `slotd run` on it.
func startReplica(t *testing.T, name, config string) *replica {
	t.Helper()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, name+".toml")
	if err := os.WriteFile(cfgPath, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	r := &replica{
		t:       t,
		name:    name,
		logPath: filepath.Join(dir, name+".log"),
		mark:    fmt.Sprintf("%d/%s/%s", os.Getpid(), t.Name(), name),
		exited:  make(chan struct{}),
	}
	logf, err := os.Create(r.logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close() // the child has its own copy
	r.cmd = exec.Command(slotdBin, "run", "-config", cfgPath)
	r.cmd.Env = append(os.Environ(), markEnv+"="+r.mark)
	r.cmd.Stdout, r.cmd.Stderr = logf, logf
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := r.cmd.Start(); err != nil {
		t.Fatalf("start replica %s: %v", name, err)
	}
	go func() {
		_ = r.cmd.Wait() // the exit status is in cmd.ProcessState
		close(r.exited)
	}()
	t.Cleanup(r.cleanup)
	return r
}

func (r *replica) pid() int { return r.cmd.Process.Pid }

// Signal sends sig to the daemon only (not to its tasks).
func (r *replica) Signal(sig syscall.Signal) {
	r.t.Helper()
	if err := syscall.Kill(r.pid(), sig); err != nil {
		r.t.Fatalf("replica %s: signal %v: %v", r.name, sig, err)
	}
}

// Kill9 kills the daemon's process group with SIGKILL and reaps it. Its
// tasks, in groups of their own, are not killed.
func (r *replica) Kill9() {
	r.t.Helper()
	if err := syscall.Kill(-r.pid(), syscall.SIGKILL); err != nil {
		r.t.Fatalf("replica %s: kill -9: %v", r.name, err)
	}
	r.Wait(10 * time.Second)
}

// Wait waits up to timeout for the process to end and returns its status.
func (r *replica) Wait(timeout time.Duration) *os.ProcessState {
	r.t.Helper()
	select {
	case <-r.exited:
		return r.cmd.ProcessState
	case <-time.After(timeout):
		r.t.Fatalf("replica %s (pid %d) still running %v later", r.name, r.pid(), timeout)
		return nil
	}
}

func (r *replica) running() bool {
	select {
	case <-r.exited:
		return false
	default:
		return true
	}
}

func (r *replica) log() string {
	b, _ := os.ReadFile(r.logPath)
	return string(b)
}

func (r *replica) cleanup() {
	t := r.t
	if r.running() {
		_ = syscall.Kill(-r.pid(), syscall.SIGKILL)
	}
	select {
	case <-r.exited:
	case <-time.After(10 * time.Second):
		t.Errorf("replica %s (pid %d) not reaped 10s after SIGKILL", r.name, r.pid())
	}
	killMarked(t, r.mark)

	log := r.log()
	if strings.Contains(log, "WARNING: DATA RACE") {
		t.Errorf("replica %s reported a data race", r.name)
	}
	for line := range strings.Lines(log) {
		if strings.HasPrefix(line, "panic: ") || strings.HasPrefix(line, "fatal error: ") {
			t.Errorf("replica %s crashed: %s", r.name, strings.TrimSpace(line))
			break
		}
	}
	if t.Failed() {
		t.Logf("replica %s (pid %d), last lines of its stderr %s:\n%s", r.name, r.pid(), r.logPath, tail(log, 40))
	}
}

// killMarked SIGKILLs the process groups of the processes whose environment
// carries mark: the task processes a replica started and left behind.
func killMarked(t *testing.T, mark string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		pids := marked(mark)
		if len(pids) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("task processes %v (mark %s) survive SIGKILL", pids, mark)
			return
		}
		for _, pid := range pids {
			if pgid, err := syscall.Getpgid(pid); err == nil && pgid != syscall.Getpgrp() {
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
			}
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(poll) // let the kernel tear them down before looking again
	}
}

// marked lists the live processes whose environment holds markEnv=mark.
func marked(mark string) []int {
	want := []byte(markEnv + "=" + mark)
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil { // gone, or a zombie
			continue
		}
		if slices.ContainsFunc(bytes.Split(env, []byte{0}), func(kv []byte) bool { return bytes.Equal(kv, want) }) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func tail(s string, n int) string {
	lines := strings.SplitAfter(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "")
}

// cluster is one redis-server, one ledger file, and the replicas of a test.
type cluster struct {
	t      *testing.T
	srv    *redistest.Server
	rdb    *redis.Client
	ledger *ledger
	reps   []*replica
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	srv := redistest.Start(t)
	return &cluster{
		t:      t,
		srv:    srv,
		rdb:    srv.Client(),
		ledger: &ledger{t: t, path: filepath.Join(t.TempDir(), "ledger")},
	}
}

// start runs n replicas, r1..rn, of one configuration: the daemon settings
// given, [defaults] lines, and [[task]] blocks.
func (c *cluster) start(n int, shutdownGrace, defaults string, tasks ...string) {
	c.t.Helper()
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("r%d", i)
		c.reps = append(c.reps, startReplica(c.t, name, config(name, c.srv.URL(), shutdownGrace, defaults, tasks...)))
	}
}

func (c *cluster) replica(name string) *replica {
	c.t.Helper()
	for _, r := range c.reps {
		if r.name == name {
			return r
		}
	}
	c.t.Fatalf("no replica %q", name)
	return nil
}

// stopAll sends SIGTERM to every replica still running and checks that
// each exits 0 soon after.
func (c *cluster) stopAll() {
	c.t.Helper()
	var live []*replica
	sent := time.Now()
	for _, r := range c.reps {
		if r.running() {
			r.Signal(syscall.SIGTERM)
			live = append(live, r)
		}
	}
	for _, r := range live {
		if st := r.Wait(15 * time.Second); st.ExitCode() != 0 {
			c.t.Errorf("replica %s: exit status %v after SIGTERM, want 0", r.name, st)
		}
	}
	c.t.Logf("%d replicas stopped %v after SIGTERM", len(live), time.Since(sent))
}

// get reads a Redis key; "" with ok false if it does not exist. A slot
// state's owner loses its instance nonce ("run:r1#3f2a…:1" reads
// "run:r1:1"): tests name replicas by id.
func (c *cluster) get(key string) (string, bool) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	v, err := c.rdb.Get(ctx, key).Result()
	if errors.Is(err, redis.Nil) {
		return "", false
	}
	if err != nil {
		c.t.Fatalf("redis GET %s: %v", key, err)
	}
	return withoutInstance(v), true
}

// awaitKey polls a Redis key until cond holds for its value, and fails the
// test with the last value if it does not within timeout.
func (c *cluster) awaitKey(key, what string, timeout time.Duration, cond func(v string, ok bool) bool) string {
	c.t.Helper()
	type read struct {
		v  string
		ok bool
	}
	r := awaitPoll(c.t, key+" "+what, timeout,
		func() read { v, ok := c.get(key); return read{v, ok} },
		func(r read) bool { return cond(r.v, r.ok) },
		func(r read) string { return fmt.Sprintf("it holds %q (exists %v)", r.v, r.ok) })
	return r.v
}

// pttl is the remaining time to live of key (negative: none, or no key).
func (c *cluster) pttl(key string) time.Duration {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d, err := c.rdb.PTTL(ctx, key).Result()
	if err != nil {
		c.t.Fatalf("redis PTTL %s: %v", key, err)
	}
	return d
}

// stateKey and attemptsKey are a slot's keys under the default prefix.
func stateKey(task, slot string) string    { return "slotd:{" + task + ":" + slot + "}" }
func attemptsKey(task, slot string) string { return stateKey(task, slot) + ":attempts" }

// config is a daemon configuration for one replica. Logs are JSON at debug
// level; HTTP listens on a free loopback port.
func config(replica, redisURL, shutdownGrace, defaults string, tasks ...string) string {
	return fmt.Sprintf(`[daemon]
replica = %s
shutdown_grace = %s

[redis]
url = %s
prefix = "slotd"

[http]
listen = "127.0.0.1:0"

[log]
level = "debug"
format = "json"

[defaults]
%s
%s`, q(replica), q(shutdownGrace), q(redisURL), defaults, strings.Join(tasks, "\n"))
}

// q quotes s as a TOML basic string (enough for the paths and scripts here).
func q(s string) string { return strconv.Quote(s) }

// recordFn defines `rec KIND`, which appends one ledger line for the running
// attempt: KIND task slot attempt replica token pgid unix_ns. $$ is the
// shell, which exec made the leader of the task's process group. One small
// O_APPEND write per line keeps lines whole across processes.
const recordFn = `rec() { echo "$1 $SLOTD_TASK $SLOTD_SLOT $SLOTD_ATTEMPT $SLOTD_REPLICA $SLOTD_FENCING_TOKEN $$ $(date +%s%N)" >> "$LEDGER"; }
`

// execTask is a [[task]] block running script under /bin/sh with rec
// defined and LEDGER pointing at the cluster's ledger. extra holds more
// task keys (lease = ..., deadline = ...).
func (c *cluster) execTask(name, schedule, script, extra string) string {
	return fmt.Sprintf(`[[task]]
name = %s
schedule = %s
plugin = "exec"
%s
  [task.params]
  command = ["/bin/sh", "-c", %s]
  grace = "1s"
  [task.params.env]
  LEDGER = %s
`, q(name), q(schedule), extra, q(recordFn+script), q(c.ledger.path))
}

// event is one ledger line.
type event struct {
	Kind    string // start, end (success), fail, term (got SIGTERM)
	Task    string
	Slot    string
	Attempt int
	Replica string
	Token   int64
	PGID    int // the task's process group
	At      time.Time
}

func (e event) String() string {
	return fmt.Sprintf("%s %s slot %s attempt %d replica %s token %d pgid %d at %s",
		e.Kind, e.Task, e.Slot, e.Attempt, e.Replica, e.Token, e.PGID, e.At.UTC().Format("15:04:05.000"))
}

// ledger is the file the tasks of a test append to.
type ledger struct {
	t    *testing.T
	path string
}

// read parses the complete lines written so far.
func (l *ledger) read() []event {
	l.t.Helper()
	b, err := os.ReadFile(l.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		l.t.Fatal(err)
	}
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		b = b[:i+1] // a line still being written is read next time
	} else {
		b = nil
	}
	var evs []event
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) != 8 {
			l.t.Fatalf("ledger: bad line %q", line)
		}
		e := event{Kind: f[0], Task: f[1], Slot: f[2], Replica: f[4]}
		var err1, err2, err3, err4 error
		e.Attempt, err1 = strconv.Atoi(f[3])
		e.Token, err2 = strconv.ParseInt(f[5], 10, 64)
		e.PGID, err3 = strconv.Atoi(f[6])
		var ns int64
		ns, err4 = strconv.ParseInt(f[7], 10, 64)
		if err := errors.Join(err1, err2, err3, err4); err != nil {
			l.t.Fatalf("ledger: bad line %q: %v", line, err)
		}
		e.At = time.Unix(0, ns)
		evs = append(evs, e)
	}
	return evs
}

// await polls the ledger until cond holds, and fails the test with the
// ledger if it does not within timeout.
func (l *ledger) await(what string, timeout time.Duration, cond func([]event) bool) []event {
	l.t.Helper()
	return awaitPoll(l.t, what, timeout, l.read, cond, func(evs []event) string { return "ledger:\n" + dump(evs) })
}

// awaitPoll reads every poll until cond holds of what read returns, and
// fails t, showing the last read through show, if it does not in timeout.
func awaitPoll[T any](t testing.TB, what string, timeout time.Duration, read func() T, cond func(T) bool, show func(T) string) T {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		v := read()
		if cond(v) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s; %s", timeout, what, show(v))
		}
		time.Sleep(poll)
	}
}

func dump(evs []event) string {
	if len(evs) == 0 {
		return "  (empty)\n"
	}
	var b strings.Builder
	for _, e := range evs {
		fmt.Fprintf(&b, "  %s\n", e)
	}
	return b.String()
}

// bySlot groups events by slot id.
func bySlot(evs []event) map[string][]event {
	m := map[string][]event{}
	for _, e := range evs {
		m[e.Slot] = append(m[e.Slot], e)
	}
	return m
}

// find returns the events of one kind and attempt (0: any attempt).
func find(evs []event, kind string, attempt int) []event {
	var out []event
	for _, e := range evs {
		if e.Kind == kind && (attempt == 0 || e.Attempt == attempt) {
			out = append(out, e)
		}
	}
	return out
}

// slotsWith counts the slots that have at least n events of kind.
func slotsWith(evs []event, kind string, n int) int {
	count := 0
	for _, es := range bySlot(evs) {
		if len(find(es, kind, 0)) >= n {
			count++
		}
	}
	return count
}

// slotTime parses a slot id (UTC, at the resolution its length says).
func slotTime(t *testing.T, id string) time.Time {
	t.Helper()
	layouts := map[int]string{14: "20060102150405", 12: "200601021504", 10: "2006010215", 8: "20060102"}
	layout, ok := layouts[len(id)]
	if !ok {
		t.Fatalf("slot id %q: unexpected length", id)
	}
	at, err := time.ParseInLocation(layout, id, time.UTC)
	if err != nil {
		t.Fatalf("slot id %q: %v", id, err)
	}
	return at
}

// sortedSlots returns the slot ids of m in time order (ids of one task sort
// as their times do).
func sortedSlots(m map[string][]event) []string {
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// httpAddr waits until the replica logs the address its HTTP server
// listens on (config() asks for 127.0.0.1:0) and returns it, host:port.
// The log must be JSON, as config() sets it.
func (r *replica) httpAddr(timeout time.Duration) string {
	r.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		for line := range strings.Lines(r.log()) {
			var rec struct{ Msg, Addr string }
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "http listening" && rec.Addr != "" {
				return rec.Addr
			}
		}
		if !r.running() {
			r.t.Fatalf("replica %s exited before its HTTP server listened:\n%s", r.name, tail(r.log(), 20))
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("replica %s: no \"http listening\" line in its log within %v", r.name, timeout)
		}
		time.Sleep(poll)
	}
}

// httpGet fetches http://addr+path and returns the status code and body;
// err is a transport error (nothing answered).
func httpGet(addr, path string) (int, string, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}
