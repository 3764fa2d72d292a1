package scheduler_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/internal/stats"
	"github.com/slotd/slotd/internal/testlane"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/redislock"
	"github.com/slotd/slotd/scheduler"
	"github.com/slotd/slotd/tasks"
)

// hook builds an on_failure hook with a registered plugin, as the
// configuration does.
func hook(t *testing.T, plugin string, params map[string]any, timeout time.Duration) *scheduler.Hook {
	t.Helper()
	factory, ok := tasks.Lookup(plugin)
	if !ok {
		t.Fatalf("no plugin %q", plugin)
	}
	job, err := factory(params, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return &scheduler.Hook{Plugin: plugin, Params: params, Timeout: timeout, Job: job}
}

// notifyStores is one redis-server and n stores on it.
func notifyStores(t *testing.T, n int) (*redistest.Server, []lock.Store) {
	srv := redistest.Start(t)
	var out []lock.Store
	for range n {
		r := redislock.New(srv.Client(), "slotd")
		if err := r.Subscribe(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		out = append(out, r)
	}
	return srv, out
}

// notified sums the replicas' hook counts by outcome.
func notified(reps []*replica) map[stats.Notify]uint64 {
	out := map[stats.Notify]uint64{}
	for _, r := range reps {
		n := &r.sched.Stats().Notifications
		for i, o := range stats.NotifyOutcomes {
			out[o] += n[i].Load()
		}
	}
	return out
}

// Three replicas race for a task whose every attempt fails: each slot ends
// exhausted, and its exec hook runs once in the fleet — not once per
// attempt, nor once per replica — with the task, slot, attempts and last
// error in its environment.
func TestExhaustedSlotNotifiesOnce(t *testing.T) {
	testlane.Parallel(t, lightLane)
	_, stores := notifyStores(t, 3)
	out := filepath.Join(t.TempDir(), "hook.out")
	h := hook(t, "exec", map[string]any{"command": []any{"/bin/sh", "-c",
		`printf '%s|%s|%s|%s|%s|%s\n' "$SLOTD_TASK" "$SLOTD_SLOT" "$SLOTD_FAILURE" "$SLOTD_ATTEMPTS" "$SLOTD_ATTEMPT" "$SLOTD_LAST_ERROR" >> "$OUT"`},
		"env": map[string]any{"OUT": out}}, 10*time.Second)
	l := newLedger()
	fail := l.job(func(_ context.Context, r tasks.Run) error { return fmt.Errorf("boom in %s #%d", r.Slot, r.Attempt) })
	task := testTask(t, "fails", "@every 1s", fail, func(d *scheduler.Task) {
		d.MaxAttempts = 2
		d.Deadline = 10 * time.Second
		d.OnFailure = h
	})
	var reps []*replica
	for i, s := range stores {
		reps = append(reps, startReplica(t, fmt.Sprintf("r%d", i), s, time.Second, []scheduler.Task{task}))
	}
	lines := func() []string {
		b, _ := os.ReadFile(out)
		return strings.Split(strings.TrimSpace(string(b)), "\n")
	}
	await(t, "three hooks", 20*time.Second, func() bool {
		b, _ := os.ReadFile(out)
		return strings.Count(string(b), "\n") >= 3
	})
	for _, r := range reps {
		r.stop()
	}
	attempts := map[string]int{}
	for _, rec := range l.snapshot() {
		attempts[rec.run.Slot]++
	}
	seen := map[string]int{}
	for _, line := range lines() {
		f := strings.Split(line, "|")
		if len(f) != 6 {
			t.Fatalf("hook wrote %q", line)
		}
		slot := f[1]
		seen[slot]++
		if f[0] != "fails" || f[2] != "exhausted" || f[3] != "2" || f[4] != "2" || f[5] != "boom in "+slot+" #2" {
			t.Errorf("hook of slot %s got task %q failure %q attempts %q attempt %q last error %q", slot, f[0], f[2], f[3], f[4], f[5])
		}
		if attempts[slot] != 2 {
			t.Errorf("hook ran for slot %s, which had %d attempts, want 2", slot, attempts[slot])
		}
	}
	for slot, n := range seen {
		if n != 1 {
			t.Errorf("slot %s: hook ran %d times, want once", slot, n)
		}
	}
	if got := notified(reps); got[stats.NotifySuccess] != uint64(len(lines())) || got[stats.NotifyFailure]+got[stats.NotifyError] != 0 {
		t.Errorf("notifications %v, want %d successes", got, len(lines()))
	}
}

// A slot no replica can start in its window (its key holds a value slotd
// did not write, so every claim refuses it) is missed: its http hook runs
// once in the fleet, with the failure as JSON; the task's other slots run
// and notify nothing.
func TestMissedSlotNotifiesOnce(t *testing.T) {
	testlane.Parallel(t, lightLane)
	srv, stores := notifyStores(t, 3)
	type call struct {
		header http.Header
		body   tasks.Failure
	}
	var mu sync.Mutex
	var calls []call
	hooked := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var f tasks.Failure
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &f); err != nil {
			t.Errorf("hook body %q: %v", b, err)
		}
		mu.Lock()
		calls = append(calls, call{r.Header.Clone(), f})
		mu.Unlock()
	}))
	defer hooked.Close()
	h := hook(t, "http", map[string]any{"url": hooked.URL + "/hook", "method": "POST"}, 10*time.Second)

	// The slot 3 to 4 s from now, on a 2 s schedule with a 1 s window.
	slotAt := time.Now().Truncate(2 * time.Second).Add(4 * time.Second)
	slotID := slotAt.UTC().Format("20060102150405")
	state, _ := redislock.Keys("slotd", lock.Slot{Task: "blocked", ID: slotID})
	if err := srv.Client().Set(context.Background(), state, "not slotd's", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	l := newLedger()
	task := testTask(t, "blocked", "@every 2s", l.job(ok), func(d *scheduler.Task) {
		d.Deadline = time.Second
		d.OnFailure = h
	})
	var reps []*replica
	for i, s := range stores {
		reps = append(reps, startReplica(t, fmt.Sprintf("r%d", i), s, time.Second, []scheduler.Task{task}))
	}
	l.await(t, "the slot after the blocked one", 20*time.Second, func(rs []record) bool {
		for _, r := range rs {
			if r.done && r.run.SlotTime.After(slotAt) {
				return true
			}
		}
		return false
	})
	await(t, "the hook", 10*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(calls) > 0 })
	for _, r := range reps {
		r.stop()
	}
	mu.Lock()
	defer mu.Unlock()
	if len(calls) != 1 {
		t.Fatalf("hook called %d times, want once: %+v", len(calls), calls)
	}
	c := calls[0]
	if f := c.body; f.Kind != tasks.FailureMissed || f.Task != "blocked" || f.Slot != slotID || !f.SlotTime.Equal(slotAt) || f.Attempts != 0 {
		t.Errorf("hook body %+v, want the missed slot %s with no attempts", f, slotID)
	}
	if c.header.Get("Slotd-Failure") != "missed" || c.header.Get("Slotd-Slot") != slotID || c.header.Get("Content-Type") != "application/json" {
		t.Errorf("hook headers %v", c.header)
	}
	for _, r := range l.snapshot() {
		if r.run.Slot == slotID {
			t.Errorf("the blocked slot ran: %+v", r.run)
		}
	}
}

// A hook that fails is logged and counted once per slot, never retried.
func TestFailingHookNotRetried(t *testing.T) {
	testlane.Parallel(t, lightLane)
	_, stores := notifyStores(t, 3)
	var mu sync.Mutex
	perSlot := map[string]int{}
	hooked := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		perSlot[r.Header.Get("Slotd-Slot")]++
		mu.Unlock()
		http.Error(w, "pager down", http.StatusServiceUnavailable)
	}))
	defer hooked.Close()
	h := hook(t, "http", map[string]any{"url": hooked.URL, "method": "POST"}, 10*time.Second)
	task := testTask(t, "fails", "@every 1s", tasks.TaskFunc(func(context.Context) error { return errors.New("boom") }),
		func(d *scheduler.Task) {
			d.MaxAttempts = 1
			d.Deadline = 10 * time.Second
			d.OnFailure = h
		})
	var logs lockedBuffer
	logger := slog.New(slog.NewJSONHandler(&logs, nil))
	var reps []*replica
	for i, s := range stores {
		reps = append(reps, startReplica(t, fmt.Sprintf("r%d", i), s, time.Second, []scheduler.Task{task}, scheduler.WithLogger(logger)))
	}
	await(t, "two failed hooks", 20*time.Second, func() bool { return notified(reps)[stats.NotifyFailure] >= 2 })
	for _, r := range reps {
		r.stop()
	}
	mu.Lock()
	defer mu.Unlock()
	total := 0
	for slot, n := range perSlot {
		total += n
		if n != 1 {
			t.Errorf("slot %s: hook called %d times, want once (never retried)", slot, n)
		}
	}
	if got := notified(reps); got[stats.NotifyFailure] != uint64(total) || got[stats.NotifySuccess] != 0 {
		t.Errorf("notifications %v, want %d failures", got, total)
	}
	logged := 0
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m["msg"] == "on_failure hook failed; not retried" && m["level"] == "ERROR" && m["task"] == "fails" &&
			strings.Contains(fmt.Sprint(m["err"]), "503") {
			logged++
		}
	}
	if logged != total {
		t.Errorf("%d hook failures logged with the status, want %d:\n%s", logged, total, logs.String())
	}
}

// lockedBuffer is a strings.Builder the replicas write and the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
