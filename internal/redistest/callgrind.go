package redistest

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"testing"
)

// Callgrind is a redis-server run under valgrind's callgrind, which counts
// the instructions the server executes. The count of the same work is the
// same on a quiet machine and a busy one, where Redis's CPU time moves by
// half between runs, so it prices a change to a script exactly
// (lock/redislock BenchmarkRedisInstructionsAtScale). Instructions are not
// time: a key looked up out of cache costs more than it counts.
type Callgrind struct {
	*Server
	out string // callgrind's output file; each dump adds .1, .2, ...
}

// StartCallgrind runs redis-server under callgrind for the benchmark b, and
// stops it at cleanup. Without valgrind the benchmark is skipped: it is a
// measurement run by hand, never part of the tests.
func StartCallgrind(b *testing.B, extra ...string) *Callgrind {
	b.Helper()
	valgrind, err := exec.LookPath("valgrind")
	if err != nil {
		b.Skipf("valgrind not installed (apt-get install -y valgrind): %v", err)
	}
	if _, err := exec.LookPath("callgrind_control"); err != nil {
		b.Skipf("callgrind_control not installed: %v", err)
	}
	bin := Binary(b)
	port := FreePort(b)
	dir := b.TempDir()
	out := filepath.Join(dir, "callgrind.out")
	s := &Server{t: b, bin: valgrind, logPath: dir + "/redis.log", Port: port, Addr: "127.0.0.1:" + strconv.Itoa(port)}
	s.args = append([]string{
		"--tool=callgrind", "--callgrind-out-file=" + out, bin,
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no",
		"--dir", dir, "--loglevel", "warning",
	}, extra...)
	s.start()
	b.Cleanup(s.Stop)
	return &Callgrind{Server: s, out: out}
}

// summary is the instruction count line of a callgrind dump.
var summary = regexp.MustCompile(`(?m)^summary: (\d+)$`)

// Instructions returns how many instructions the server executed while f
// ran (callgrind's counters zeroed before, dumped after).
func (c *Callgrind) Instructions(b *testing.B, f func()) int64 {
	b.Helper()
	c.control(b, "--zero")
	f()
	before, _ := filepath.Glob(c.out + ".*")
	c.control(b, "--dump")
	after, _ := filepath.Glob(c.out + ".*")
	var dumped []string
	for _, f := range after {
		if !slices.Contains(before, f) {
			dumped = append(dumped, f)
		}
	}
	if len(dumped) != 1 {
		b.Fatalf("redistest: callgrind dump: new files %v, want one", dumped)
	}
	newest := dumped[0]
	data, err := os.ReadFile(newest)
	if err != nil {
		b.Fatalf("redistest: callgrind dump: %v", err)
	}
	m := summary.FindSubmatch(data)
	if m == nil {
		b.Fatalf("redistest: callgrind dump %s has no summary line", newest)
	}
	n, err := strconv.ParseInt(string(m[1]), 10, 64)
	if err != nil {
		b.Fatalf("redistest: callgrind dump %s: %v", newest, err)
	}
	return n
}

// control runs callgrind_control with arg on the server's process.
func (c *Callgrind) control(b *testing.B, arg string) {
	b.Helper()
	out, err := exec.Command("callgrind_control", arg, strconv.Itoa(c.PID())).CombinedOutput()
	if err != nil {
		b.Fatalf("redistest: callgrind_control %s: %v: %s", arg, err, out)
	}
}
