package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/internal/assemble"
	"github.com/slotd/slotd/internal/observe"
	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/internal/stats"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/redislock"
	"github.com/slotd/slotd/scheduler"
)

// shared is a redis-server, a configuration file pointing at it, and the
// protocol and history on it, for seeding the state the commands read.
type shared struct {
	t     *testing.T
	path  string
	cfg   *assemble.Daemon
	rdb   *redis.Client
	store *redislock.Store
	hist  *redislock.History
	now   time.Time // the Redis clock at start
}

// Both tasks fire daily with a 47h window, so that the latest slot's
// window is open whatever the time of day the test runs.
const sharedTasks = `
[defaults]
deadline = "47h"

[[task]]
name = "report"
schedule = "@every 24h"
plugin = "exec"
  [task.params]
  command = ["/bin/true"]

[[task]]
name = "backup"
schedule = "@every 24h"
plugin = "exec"
  [task.params]
  command = ["/bin/true"]
`

func newShared(t *testing.T) *shared {
	t.Helper()
	srv := redistest.Start(t)
	path := filepath.Join(t.TempDir(), "slotd.toml")
	src := fmt.Sprintf(`[redis]
url = %q

[http]
listen = "off"

[log]
format = "json"
%s`, srv.URL(), sharedTasks)
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := assemble.Load(path, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	rdb := srv.Client()
	s := &shared{t: t, path: path, cfg: cfg, rdb: rdb, store: redislock.New(rdb, "slotd"),
		hist: redislock.NewHistory(rdb, "slotd", time.Hour)}
	if s.now, err = s.store.Time(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *shared) task(name string) *scheduler.Task {
	s.t.Helper()
	task, err := findTask(s.cfg, name)
	if err != nil {
		s.t.Fatal(err)
	}
	return task
}

// latest is task's latest slot, whose window is open.
func (s *shared) latest(name string) lock.Slot {
	s.t.Helper()
	task := s.task(name)
	at, ok := task.Schedule.Latest(s.now)
	if !ok {
		s.t.Fatal("no latest slot")
	}
	return task.Slot(at)
}

// claim wins slot for replica with a long lease.
func (s *shared) claim(slot lock.Slot, replica string) lock.Owner {
	s.t.Helper()
	task := s.task(slot.Task)
	c, err := s.store.Claim(context.Background(), slot, replica,
		lock.Policy{Lease: time.Hour, DoneTTL: task.DoneTTL, MaxAttempts: task.MaxAttempts})
	if err != nil || c.Result != lock.Won {
		s.t.Fatalf("claim %s: %+v, %v", slot, c, err)
	}
	return lock.Owner{ID: replica, Attempt: c.Attempt}
}

// done claims and completes slot for replica, recording the attempt.
func (s *shared) done(slot lock.Slot, replica string) {
	s.t.Helper()
	o := s.claim(slot, replica)
	if err := s.store.Complete(context.Background(), slot, o, s.task(slot.Task).DoneTTL); err != nil {
		s.t.Fatal(err)
	}
	s.record(slot, o, "success", "")
}

func (s *shared) record(slot lock.Slot, o lock.Owner, outcome, errText string) {
	s.t.Helper()
	err := s.hist.Append(context.Background(), slot.Task, scheduler.HistoryEntry{
		Slot: slot.ID, SlotTime: slot.Time, Attempt: o.Attempt, Token: lock.Token(slot.Time, o.Attempt),
		Replica: o.ID, Outcome: stats.Outcome(outcome), Started: s.now, Duration: 1500 * time.Millisecond, Error: errText,
	})
	if err != nil {
		s.t.Fatal(err)
	}
}

func (s *shared) exists(key string) bool {
	s.t.Helper()
	n, err := s.rdb.Exists(context.Background(), key).Result()
	if err != nil {
		s.t.Fatal(err)
	}
	return n == 1
}

type result struct {
	code           int
	stdout, stderr string
}

func runCLI(t *testing.T, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := Main(context.Background(), args, &stdout, &stderr)
	return result{code, stdout.String(), stderr.String()}
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// status shows each task's recent slots from Redis, as a table and as JSON:
// a completed slot with its winner, a running one with its holder.
func TestStatusCommand(t *testing.T) {
	s := newShared(t)
	report := s.latest("report")
	s.done(report, "r1")
	backup := s.latest("backup")
	s.claim(backup, "r2")

	r := runCLI(t, "status", "-config", s.path, "-json", "-n", "3")
	if r.code != 0 {
		t.Fatalf("status -json: %v", r)
	}
	var rep observe.StatusReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("status -json output: %v\n%s", err, r.stdout)
	}
	if len(rep.Tasks) != 2 || rep.Tasks[0].Name != "report" || len(rep.Tasks[0].Slots) != 3 || rep.Now.Before(s.now) {
		t.Fatalf("status -json: %s", r.stdout)
	}
	got := rep.Tasks[0].Slots[0]
	if got.ID != report.ID || got.Phase != "done" || got.Replica != "r1" || got.Attempts != 1 ||
		got.Last == nil || got.Last.Outcome != "success" || got.Last.Duration != 1500*time.Millisecond {
		t.Errorf("report's latest slot: %+v", got)
	}
	if got := rep.Tasks[1].Slots[0]; got.ID != backup.ID || got.Phase != "running" || got.Replica != "r2" {
		t.Errorf("backup's latest slot: %+v", got)
	}
	if got := rep.Tasks[0].Slots[1]; got.Phase != "pending" && got.Phase != "missed" {
		// The previous slot's 47h window may still be open.
		t.Errorf("report's previous slot: %+v, want pending or missed", got)
	}

	r = runCLI(t, "status", "-config", s.path)
	if r.code != 0 {
		t.Fatalf("status: %v", r)
	}
	for _, want := range []string{"report", "backup", report.ID, "done", "r1", "running", "r2", "success #1", "PHASE"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("status output lacks %q:\n%s", want, r.stdout)
		}
	}
	line := lineWith(r.stdout, report.ID)
	if !strings.Contains(line, "done") || !strings.Contains(line, "1/3") || !strings.Contains(line, "r1") {
		t.Errorf("report's slot line %q: want done, 1/3, r1", line)
	}
}

func lineWith(s, sub string) string {
	for line := range strings.Lines(s) {
		if strings.Contains(line, sub) {
			return line
		}
	}
	return ""
}

// history lists a task's latest attempts, newest first, with their errors
// on one line.
func TestHistoryCommand(t *testing.T) {
	s := newShared(t)
	slot := s.latest("report")
	s.record(slot, lock.Owner{ID: "r1", Attempt: 1}, "failure", "exit status 1\nline two")
	s.record(slot, lock.Owner{ID: "r2", Attempt: 2}, "timeout", "scheduler: task timed out")
	s.record(slot, lock.Owner{ID: "r3", Attempt: 3}, "success", "")

	r := runCLI(t, "history", "-config", s.path, "-n", "2", "report")
	if r.code != 0 {
		t.Fatalf("history: %v", r)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 4 { // title, header, 2 entries
		t.Fatalf("history -n 2 wrote %d lines:\n%s", len(lines), r.stdout)
	}
	if !strings.Contains(lines[2], "r3") || !strings.Contains(lines[2], "success") ||
		!strings.Contains(lines[3], "r2") || !strings.Contains(lines[3], "timeout") || !strings.Contains(lines[3], "timed out") {
		t.Errorf("history -n 2 not newest first:\n%s", r.stdout)
	}

	// Flags may follow the task, as operators type them.
	r = runCLI(t, "history", "-config", s.path, "report", "-json")
	if r.code != 0 {
		t.Fatalf("history -json: %v", r)
	}
	var out struct {
		Task    string                   `json:"task"`
		Entries []scheduler.HistoryEntry `json:"entries"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatal(err)
	}
	if out.Task != "report" || len(out.Entries) != 3 || out.Entries[2].Error != "exit status 1\nline two" || out.Entries[0].Attempt != 3 {
		t.Errorf("history -json: %s", r.stdout)
	}
	if lineWith(runCLI(t, "history", "-config", s.path, "report").stdout, "line two") == "" {
		t.Errorf("history does not show the error")
	}

	if r := runCLI(t, "history", "-config", s.path, "nosuch"); r.code != 2 || !strings.Contains(r.stderr, "nosuch") {
		t.Errorf("history of an unknown task: %v", r)
	}
	if r := runCLI(t, "history", "-config", s.path); r.code != 2 {
		t.Errorf("history without a task: %v", r)
	}
	if r := runCLI(t, "history", "-config", s.path, "backup"); r.code != 0 || !strings.Contains(r.stdout, "no attempts") {
		t.Errorf("history of a task without attempts: %v", r)
	}
}

// rerun refuses a running slot unless forced, clears a done slot's marker
// and attempts and wakes the watchers, and rejects slots that are not the
// task's or whose window is not open.
func TestRerunCommand(t *testing.T) {
	s := newShared(t)
	ctx := context.Background()
	ps := s.rdb.Subscribe(ctx, "slotd:released")
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil {
		t.Fatal(err)
	}

	running := s.latest("backup")
	runKey, runAttempts := redislock.Keys("slotd", running)
	s.claim(running, "r2")
	r := runCLI(t, "rerun", "-config", s.path, "backup", running.ID)
	if r.code != 1 || !strings.Contains(r.stderr, "running") || !strings.Contains(r.stderr, "-force") {
		t.Errorf("rerun of a running slot: %v", r)
	}
	if !s.exists(runKey) || !s.exists(runAttempts) {
		t.Fatalf("refused rerun changed the slot's keys")
	}
	r = runCLI(t, "rerun", "-config", s.path, "-force", "backup", running.ID)
	if r.code != 0 || s.exists(runKey) || !s.exists(runAttempts) {
		t.Fatalf("rerun -force of a running slot: %v (want the state gone, the attempts kept)", r)
	}
	if !strings.Contains(r.stderr, "slot cleared for a rerun") || !strings.Contains(r.stderr, `"forced":true`) {
		t.Errorf("rerun -force not logged: %v", r)
	}
	awaitRelease(t, ps, runKey)

	done := s.latest("report")
	doneKey, doneAttempts := redislock.Keys("slotd", done)
	s.done(done, "r1")
	r = runCLI(t, "rerun", "-config", s.path, "report", done.ID)
	if r.code != 0 {
		t.Fatalf("rerun of a done slot: %v", r)
	}
	if s.exists(doneKey) || !s.exists(doneAttempts) {
		t.Errorf("rerun left the done marker, or dropped the attempts counter the fencing tokens grow from")
	}
	if !strings.Contains(r.stdout, "cleared slot "+done.ID) || !strings.Contains(r.stdout, "done:r1:1:") ||
		!strings.Contains(r.stdout, "1 attempts so far") {
		t.Errorf("rerun does not say what it cleared: %v", r)
	}
	if !strings.Contains(r.stderr, "slot cleared for a rerun") || !strings.Contains(r.stderr, `"previous_state":"done:r1:1:`) {
		t.Errorf("rerun not logged: %v", r)
	}
	awaitRelease(t, ps, doneKey)
	// The slot may be claimed again, as attempt 2 with a full set of
	// attempts (base 1): its fencing token is above the first run's.
	c, err := s.store.Claim(context.Background(), done, "r3", lock.Policy{Lease: time.Hour, DoneTTL: time.Hour, MaxAttempts: 1})
	if err != nil || c.Result != lock.Won || c.Attempt != 2 || c.Base != 1 {
		t.Errorf("claim after rerun with max_attempts 1: %+v, %v; want won, attempt 2, base 1", c, err)
	}

	task := s.task("report")
	next := task.Slot(task.Schedule.Next(s.now))
	old := task.Slot(task.Schedule.Next(s.now.Add(-72 * time.Hour)))
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"bad slot id", []string{"report", "2024"}, 2, "slot id"},
		{"slot id of another resolution", []string{"report", done.ID + "00"}, 2, "slot id"},
		{"unknown task", []string{"nosuch", done.ID}, 2, "nosuch"},
		{"missing slot", []string{"report"}, 2, "want 2 arguments"},
		{"future slot", []string{"report", next.ID}, 1, "nothing to rerun yet"},
		{"closed window", []string{"report", old.ID}, 1, "closed"},
	} {
		r := runCLI(t, append([]string{"rerun", "-config", s.path}, tc.args...)...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%s: got %v; want exit %d and %q", tc.name, r, tc.code, tc.want)
		}
	}
}

func awaitRelease(t *testing.T, ps *redis.PubSub, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		msg, err := ps.ReceiveMessage(ctx)
		if err != nil {
			t.Fatalf("no release notification for %s: %v", key, err)
		}
		if msg.Payload == key {
			return
		}
	}
}

// The read commands refuse the embedded store, which has no shared state,
// and report an unreachable Redis as an error.
func TestStatusCommandErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, config string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	embedded := write("embedded.toml", `[http]
listen = "127.0.0.1:9999"
`+sharedTasks)
	for _, args := range [][]string{{"status"}, {"history", "report"}, {"rerun", "report", "20240115"}} {
		r := runCLI(t, append([]string{args[0], "-config", embedded}, args[1:]...)...)
		if r.code != 1 || !strings.Contains(r.stderr, "no shared state") || !strings.Contains(r.stderr, "http://127.0.0.1:9999/") {
			t.Errorf("%s on the embedded store: %v", args[0], r)
		}
	}
	down := write("down.toml", fmt.Sprintf("[redis]\nurl = \"redis://127.0.0.1:%d/0\"\n%s", redistest.FreePort(t), sharedTasks))
	if r := runCLI(t, "status", "-config", down); r.code != 1 || r.stderr == "" {
		t.Errorf("status with Redis down: %v", r)
	}
	if r := runCLI(t, "status", "-config", filepath.Join(dir, "missing.toml")); r.code != 2 {
		t.Errorf("status with a missing config: %v", r)
	}
	if r := runCLI(t, "status", "-config", down, "-n", "0"); r.code != 2 {
		t.Errorf("status -n 0: %v", r)
	}
	if r := runCLI(t, "status", "-config", down, "extra"); r.code != 2 {
		t.Errorf("status with an extra argument: %v", r)
	}
}

func TestClean(t *testing.T) {
	for in, want := range map[string]string{
		"plain":                  "plain",
		"two\nlines\r\n":         "two lines",
		"esc \x1b[31mred\x1b[0m": "esc [31mred [0m",
		"bidi \u202egnp.exe":     "bidi gnp.exe",
		"bad \xff utf8":          "bad ? utf8",
	} {
		if got := clean(in); got != want {
			t.Errorf("clean(%q) = %q, want %q", in, got, want)
		}
	}
}

// One key of the wrong type — report's latest slot key, or report's
// history stream, or its pause key — costs report alone: status prints
// every task, report with its error naming what could not be read, backup
// in full, and exits 0 (the error is repeated on stderr).
func TestStatusWrongTypeKeyIsPerTask(t *testing.T) {
	s := newShared(t)
	backup := s.latest("backup")
	s.done(backup, "r1")
	report := s.latest("report")
	state, _ := redislock.Keys("slotd", report)
	_, paused, _, _ := redislock.ControlKeys("slotd", "report")
	for _, c := range []struct{ what, key, want string }{
		{"slot key", state, "slot " + report.ID},
		{"history stream", redislock.HistoryKey("slotd", "report"), "history: read report"},
		{"pause key", paused, "pause state"},
	} {
		t.Run(c.what, func(t *testing.T) {
			ctx := context.Background()
			if err := s.rdb.Del(ctx, state, redislock.HistoryKey("slotd", "report"), paused).Err(); err != nil {
				t.Fatal(err)
			}
			if err := s.rdb.RPush(ctx, c.key, "planted").Err(); err != nil {
				t.Fatal(err)
			}
			r := runCLI(t, "status", "-config", s.path, "-json")
			var rep observe.StatusReport
			if r.code != 0 || json.Unmarshal([]byte(r.stdout), &rep) != nil || len(rep.Tasks) != 2 {
				t.Fatalf("status -json with a %s of the wrong type:\n%s", c.what, r)
			}
			for _, ts := range rep.Tasks {
				switch ts.Name {
				case "report":
					if !strings.Contains(ts.ReadError, c.want) || !strings.Contains(ts.ReadError, "WRONGTYPE") {
						t.Errorf("report's read_error = %q, want it to name %q and WRONGTYPE", ts.ReadError, c.want)
					}
				case "backup":
					if ts.ReadError != "" || len(ts.Slots) == 0 || ts.Slots[0].Phase != observe.PhaseDone {
						t.Errorf("backup, whose keys are fine: %+v", ts)
					}
				}
			}
			if !strings.Contains(r.stderr, "task report not read in full") {
				t.Errorf("stderr does not say report was not read in full:\n%s", r)
			}
			r = runCLI(t, "status", "-config", s.path)
			if r.code != 0 || !strings.Contains(r.stdout, "NOT READ IN FULL") || !strings.Contains(r.stdout, backup.ID) {
				t.Errorf("status with a %s of the wrong type:\n%s", c.what, r)
			}
		})
	}
}
