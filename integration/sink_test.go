package integration

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// The sink is the downstream store of the fault tests: an HTTP server on
// 127.0.0.1, started by the test, that the tasks write to with their
// fencing token — the way a real store guarded by fencing tokens would be
// used.
//
// A task writes twice: "begin" when it starts (so the store learns the new
// holder's token before any result arrives, as a real store would on the
// first write of an attempt) and "commit", its result, at the end. The sink
// keeps, per task, the highest token it has seen and the highest token it
// has committed:
//
//   - any write whose token is lower than the highest seen is refused (409):
//     a stale writer — a holder whose lease ran out while it was paused — is
//     visibly rejected as soon as its successor has written anything;
//   - a commit whose token is not higher than the highest committed is
//     refused too: the sink accepts a result only when its fencing token is
//     higher than any result it has accepted for that task. (After Redis
//     loses its data, attempt numbers, hence tokens, restart: a slot that
//     runs again carries the same token and its second result is refused.)
//
// Tasks reach the sink through sinkpost, a tiny Go client built once per
// test binary (curl is not on every machine): `sinkpost begin|commit`
// reads SINK_URL and the SLOTD_* variables the exec plugin sets, and exits
// 0 when the write was accepted, 3 when it was refused, 1 on any error.
type sink struct {
	t   *testing.T
	srv *httptest.Server

	mu        sync.Mutex
	seen      map[string]int64 // task -> highest token of an accepted write
	committed map[string]int64 // task -> highest token of an accepted commit
	writes    []sinkWrite      // every request, in arrival order
}

// sinkWrite is one request to the sink.
type sinkWrite struct {
	Kind     string // begin or commit
	Task     string
	Slot     string
	Attempt  int
	Replica  string
	Token    int64
	Accepted bool
	At       time.Time
}

func (w sinkWrite) String() string {
	verdict := "accepted"
	if !w.Accepted {
		verdict = "REJECTED"
	}
	return fmt.Sprintf("%s %s slot %s attempt %d replica %s token %d %s at %s",
		w.Kind, w.Task, w.Slot, w.Attempt, w.Replica, w.Token, verdict, w.At.UTC().Format("15:04:05.000"))
}

func newSink(t *testing.T) *sink {
	t.Helper()
	s := &sink{t: t, seen: map[string]int64{}, committed: map[string]int64{}}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *sink) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	q := r.URL.Query()
	wr := sinkWrite{Kind: q.Get("kind"), Task: q.Get("task"), Slot: q.Get("slot"), Replica: q.Get("replica"), At: time.Now()}
	var err1, err2 error
	wr.Attempt, err1 = strconv.Atoi(q.Get("attempt"))
	wr.Token, err2 = strconv.ParseInt(q.Get("token"), 10, 64)
	if err1 != nil || err2 != nil || wr.Task == "" || (wr.Kind != "begin" && wr.Kind != "commit") {
		http.Error(w, "bad write: "+r.URL.RawQuery, http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	seen, okSeen := s.seen[wr.Task]
	wr.Accepted = !okSeen || wr.Token >= seen
	if wr.Kind == "commit" {
		if c, ok := s.committed[wr.Task]; ok && wr.Token <= c {
			wr.Accepted = false
		}
	}
	if wr.Accepted {
		s.seen[wr.Task] = max(seen, wr.Token)
		if wr.Kind == "commit" {
			s.committed[wr.Task] = wr.Token
		}
	}
	s.writes = append(s.writes, wr)
	s.mu.Unlock()
	if !wr.Accepted {
		http.Error(w, "stale fencing token", http.StatusConflict)
		return
	}
	fmt.Fprintln(w, "ok")
}

// all returns every write so far.
func (s *sink) all() []sinkWrite {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sinkWrite(nil), s.writes...)
}

// results returns the writes of kind for slot (any slot if ""), accepted
// or not as asked.
func (s *sink) results(kind, slot string, accepted bool) []sinkWrite {
	var out []sinkWrite
	for _, w := range s.all() {
		if w.Kind == kind && (slot == "" || w.Slot == slot) && w.Accepted == accepted {
			out = append(out, w)
		}
	}
	return out
}

// await polls the sink until cond holds, and fails the test with its
// writes if it does not within timeout.
func (s *sink) await(what string, timeout time.Duration, cond func([]sinkWrite) bool) []sinkWrite {
	s.t.Helper()
	return awaitPoll(s.t, what, timeout, s.all, cond, func(ws []sinkWrite) string { return "sink:\n" + dumpWrites(ws) })
}

func dumpWrites(ws []sinkWrite) string {
	if len(ws) == 0 {
		return "  (empty)\n"
	}
	var out string
	for _, w := range ws {
		out += "  " + w.String() + "\n"
	}
	return out
}

// sinkpostSrc is the sink's client, run by the tasks.
const sinkpostSrc = `package main

import (
	"fmt"
	"net/http"
	"net/url"
	"os"
	"time"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: sinkpost begin|commit")
		os.Exit(2)
	}
	q := url.Values{}
	q.Set("kind", os.Args[1])
	q.Set("task", os.Getenv("SLOTD_TASK"))
	q.Set("slot", os.Getenv("SLOTD_SLOT"))
	q.Set("attempt", os.Getenv("SLOTD_ATTEMPT"))
	q.Set("replica", os.Getenv("SLOTD_REPLICA"))
	q.Set("token", os.Getenv("SLOTD_FENCING_TOKEN"))
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Post(os.Getenv("SINK_URL")+"/write?"+q.Encode(), "text/plain", nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sinkpost:", err)
		os.Exit(1)
	}
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		os.Exit(0)
	case http.StatusConflict:
		os.Exit(3)
	default:
		fmt.Fprintln(os.Stderr, "sinkpost:", resp.Status)
		os.Exit(1)
	}
}
`

var (
	sinkpostOnce sync.Once
	sinkpostBin  string
	sinkpostErr  error
)

// sinkpost builds the sink client once, next to the slotd binary (so
// TestMain's clean-up removes it), and returns its path.
func sinkpost(t *testing.T) string {
	t.Helper()
	sinkpostOnce.Do(func() {
		dir := filepath.Join(filepath.Dir(slotdBin), "sinkpost-src")
		if sinkpostErr = os.MkdirAll(dir, 0o755); sinkpostErr != nil {
			return
		}
		src := filepath.Join(dir, "main.go")
		if sinkpostErr = os.WriteFile(src, []byte(sinkpostSrc), 0o644); sinkpostErr != nil {
			return
		}
		bin := filepath.Join(filepath.Dir(slotdBin), "sinkpost")
		build := exec.Command("go", "build", "-o", bin, src)
		build.Dir = dir
		build.Env = append(os.Environ(), "GO111MODULE=on", "GOFLAGS=")
		if out, err := build.CombinedOutput(); err != nil {
			sinkpostErr = fmt.Errorf("go build sinkpost: %v\n%s", err, out)
			return
		}
		sinkpostBin = bin
	})
	if sinkpostErr != nil {
		t.Fatal(sinkpostErr)
	}
	return sinkpostBin
}

// postFn defines `post KIND`, which writes to the sink for the running
// attempt and fails when the sink refuses the write.
const postFn = `post() { "$SINKPOST" "$1"; }
`

// sinkTask is an exec [[task]] block like execTask, whose script may also
// call post (begin or commit) to write to s.
func (c *cluster) sinkTask(s *sink, name, schedule, script, extra string) string {
	c.t.Helper()
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
  SINK_URL = %s
  SINKPOST = %s
`, q(name), q(schedule), extra, q(recordFn+postFn+script), q(c.ledger.path), q(s.srv.URL), q(sinkpost(c.t)))
}

// TestSinkRejectsStaleWriter checks the sink itself, without slotd: a write
// with a lower token than one already seen is refused, and so is a second
// result with the same token.
func TestSinkRejectsStaleWriter(t *testing.T) {
	t.Parallel()
	s := newSink(t)
	bin := sinkpost(t)
	post := func(kind string, token int64, attempt int) int {
		t.Helper()
		cmd := exec.Command(bin, kind)
		cmd.Env = append(os.Environ(), "SINK_URL="+s.srv.URL, "SLOTD_TASK=t", "SLOTD_SLOT=s",
			"SLOTD_ATTEMPT="+strconv.Itoa(attempt), "SLOTD_REPLICA=r", "SLOTD_FENCING_TOKEN="+strconv.FormatInt(token, 10))
		err := cmd.Run()
		if err == nil {
			return 0
		}
		if xe, ok := err.(*exec.ExitError); ok {
			return xe.ExitCode()
		}
		t.Fatalf("sinkpost: %v", err)
		return -1
	}
	for _, step := range []struct {
		kind    string
		token   int64
		attempt int
		want    int
	}{
		{"begin", 1001, 1, 0},  // the first holder starts
		{"begin", 1002, 2, 0},  // a peer takes over with a higher token
		{"commit", 1001, 1, 3}, // the stale holder's result: refused
		{"begin", 1001, 1, 3},  // and so is anything else it writes
		{"commit", 1002, 2, 0}, // the new holder's result
		{"commit", 1002, 2, 3}, // the same token again: one result per token
		{"commit", 2001, 1, 0}, // the next slot
	} {
		if got := post(step.kind, step.token, step.attempt); got != step.want {
			t.Errorf("sinkpost %s token %d: exit %d, want %d", step.kind, step.token, got, step.want)
		}
	}
	if n := len(s.results("commit", "", true)); n != 2 {
		t.Errorf("%d accepted commits, want 2:\n%s", n, dumpWrites(s.all()))
	}
}
