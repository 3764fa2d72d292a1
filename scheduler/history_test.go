package scheduler_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/scheduler"
	"github.com/slotd/slotd/tasks"
)

// histories returns both implementations, the Redis one on a fresh server.
func histories(t *testing.T) map[string]scheduler.History {
	srv := redistest.Start(t)
	a, b := redistest.Start(t), redistest.Start(t)
	return map[string]scheduler.History{
		"memory": scheduler.NewMemoryHistory(0),
		"redis":  scheduler.NewRedisHistory(srv.Client(), "slotd", time.Hour),
		"multi": scheduler.NewMultiHistory(scheduler.NewRedisHistory(a.Client(), "slotd", time.Hour),
			scheduler.NewRedisHistory(b.Client(), "slotd", time.Hour)),
	}
}

// A MultiHistory (Redlock mode: one stream per node) reads the union of
// what its stores hold, once each, newest first, while any of them
// answers, and takes appends while any of them does.
func TestMultiHistoryMergesAndSurvives(t *testing.T) {
	ctx := context.Background()
	a, b := redistest.Start(t), redistest.Start(t)
	ha := scheduler.NewRedisHistory(a.Client(), "slotd", time.Hour)
	hb := scheduler.NewRedisHistory(b.Client(), "slotd", time.Hour)
	m := scheduler.NewMultiHistory(ha, hb)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(m.Append(ctx, "job", entry("s", 1, "failure", "x")))
	must(ha.Append(ctx, "job", entry("s", 2, "failure", "y"))) // b was down
	must(hb.Append(ctx, "job", entry("s", 3, "success", "")))  // a was down
	attempts := func(es []scheduler.HistoryEntry) (out []int) {
		for _, e := range es {
			out = append(out, e.Attempt)
		}
		return out
	}
	got, err := m.Recent(ctx, "job", 10)
	if err != nil || fmt.Sprint(attempts(got)) != "[3 2 1]" {
		t.Fatalf("merged = %v, %v; want attempts [3 2 1], each once", attempts(got), err)
	}
	if got, _ := m.Recent(ctx, "job", 2); fmt.Sprint(attempts(got)) != "[3 2]" {
		t.Fatalf("newest 2 = %v, want [3 2]", attempts(got))
	}
	b.Stop()
	must(m.Append(ctx, "job", entry("s", 4, "success", "")))
	if got, err := m.Recent(ctx, "job", 10); err != nil || fmt.Sprint(attempts(got)) != "[4 2 1]" {
		t.Fatalf("with b down = %v, %v; want [4 2 1] from a", attempts(got), err)
	}
	a.Stop()
	if err := m.Append(ctx, "job", entry("s", 5, "success", "")); err == nil {
		t.Fatal("append with every store down: want an error")
	}
	if _, err := m.Recent(ctx, "job", 10); err == nil {
		t.Fatal("read with every store down: want an error")
	}
}

func entry(slot string, attempt int, outcome, errText string) scheduler.HistoryEntry {
	at := time.Date(2024, 1, 15, 14, 0, 0, 0, time.UTC)
	return scheduler.HistoryEntry{
		Slot: slot, SlotTime: at, Attempt: attempt, Token: lock.Token(at, attempt),
		Replica: "r1", Outcome: outcome,
		Started:  at.Add(time.Duration(attempt)*time.Second + 123456789*time.Nanosecond),
		Duration: 1500 * time.Millisecond, Error: errText,
	}
}

// Recent returns the latest entries newest first, with every field as it
// was appended, and nothing for another task.
func TestHistoryAppendRecent(t *testing.T) {
	for name, h := range histories(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			want := []scheduler.HistoryEntry{
				entry("2024011514", 1, "failure", "tasks: exec: exit status 1"),
				entry("2024011514", 2, "timeout", "scheduler: task timed out"),
				entry("2024011514", 3, "success", ""),
			}
			for _, e := range want {
				if err := h.Append(ctx, "report", e); err != nil {
					t.Fatal(err)
				}
			}
			if err := h.Append(ctx, "other", entry("2024011515", 1, "success", "")); err != nil {
				t.Fatal(err)
			}
			got, err := h.Recent(ctx, "report", 2)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 2 {
				t.Fatalf("Recent(2) returned %d entries: %+v", len(got), got)
			}
			for i, g := range got {
				w := want[len(want)-1-i]
				if g.ID == "" {
					t.Errorf("entry %d has no id", i)
				}
				g.ID = ""
				if !g.SlotTime.Equal(w.SlotTime) || !g.Started.Equal(w.Started) {
					t.Errorf("entry %d times: got %v / %v, want %v / %v", i, g.SlotTime, g.Started, w.SlotTime, w.Started)
				}
				g.SlotTime, g.Started, w.SlotTime, w.Started = time.Time{}, time.Time{}, time.Time{}, time.Time{}
				if g != w {
					t.Errorf("entry %d:\n got %+v\nwant %+v", i, g, w)
				}
			}
			if got[0].ID <= got[1].ID && len(got[0].ID) == len(got[1].ID) {
				t.Errorf("ids not newest first: %s then %s", got[0].ID, got[1].ID)
			}
			all, _ := h.Recent(ctx, "report", 100)
			if len(all) != 3 {
				t.Errorf("Recent(100) returned %d entries, want 3", len(all))
			}
			if none, err := h.Recent(ctx, "nosuchtask", 10); err != nil || len(none) != 0 {
				t.Errorf("Recent of a task without history: %v, %v", none, err)
			}
			if none, _ := h.Recent(ctx, "report", 0); len(none) != 0 {
				t.Errorf("Recent(0) returned %d entries", len(none))
			}
		})
	}
}

// An error is stored as valid UTF-8 of at most 1 KiB, cut at a rune.
func TestHistoryErrorTruncated(t *testing.T) {
	long := strings.Repeat("é", 300) + "\xff\xfe" + strings.Repeat("x", 5000)
	for name, h := range histories(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			if err := h.Append(ctx, "report", entry("2024011514", 1, "failure", long)); err != nil {
				t.Fatal(err)
			}
			got, err := h.Recent(ctx, "report", 1)
			if err != nil || len(got) != 1 {
				t.Fatalf("Recent: %v, %v", got, err)
			}
			e := got[0].Error
			if len(e) > scheduler.MaxHistoryError || !utf8.ValidString(e) {
				t.Errorf("error is %d bytes, valid UTF-8 %v; want <= %d and valid", len(e), utf8.ValidString(e), scheduler.MaxHistoryError)
			}
			if !strings.HasPrefix(e, strings.Repeat("é", 300)) || !strings.HasSuffix(e, "…") {
				t.Errorf("error not cut at its end with a mark: %q...%q", e[:20], e[len(e)-20:])
			}
		})
	}
}

// The Redis stream has a TTL after every append, and is capped near
// HistoryMaxLen.
func TestRedisHistoryTTLAndCap(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	h := scheduler.NewRedisHistory(rdb, "pfx", 7*24*time.Hour)
	ctx := context.Background()
	key := scheduler.HistoryKey("pfx", "report")
	if key != "pfx:history:{report}" {
		t.Errorf("HistoryKey = %q", key)
	}
	const n = scheduler.HistoryMaxLen + 300
	for i := range n {
		if err := h.Append(ctx, "report", entry("2024011514", i%999+1, "success", "")); err != nil {
			t.Fatal(err)
		}
	}
	ttl, err := rdb.PTTL(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	if ttl <= 7*24*time.Hour-time.Minute || ttl > 7*24*time.Hour {
		t.Errorf("PTTL of %s = %v, want about 168h", key, ttl)
	}
	l, err := rdb.XLen(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	// MAXLEN ~ trims whole stream nodes (100 entries by default).
	if l < scheduler.HistoryMaxLen || l >= n {
		t.Errorf("XLEN %s = %d after %d appends, want %d..%d", key, l, n, scheduler.HistoryMaxLen, n-1)
	}
}

func TestHistoryTTL(t *testing.T) {
	cfg := &scheduler.Config{Tasks: []scheduler.Task{{Policy: lock.Policy{DoneTTL: 48 * time.Hour}}}}
	if got := scheduler.HistoryTTL(cfg); got != scheduler.MinHistoryTTL {
		t.Errorf("HistoryTTL with done_ttl 48h = %v, want %v", got, scheduler.MinHistoryTTL)
	}
	cfg.Tasks = append(cfg.Tasks, scheduler.Task{Policy: lock.Policy{DoneTTL: 30 * 24 * time.Hour}})
	if got := scheduler.HistoryTTL(cfg); got != 30*24*time.Hour {
		t.Errorf("HistoryTTL with done_ttl 720h = %v, want 720h", got)
	}
}

// JSON has snake_case keys and the duration in milliseconds, and reads
// back.
func TestHistoryEntryJSON(t *testing.T) {
	e := entry("2024011514", 2, "failure", "boom")
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"id", "slot", "slot_time", "attempt", "token", "replica", "outcome", "started", "duration_ms", "error"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON %s lacks %q", b, k)
		}
	}
	if m["duration_ms"] != 1500.0 {
		t.Errorf("duration_ms = %v, want 1500", m["duration_ms"])
	}
	var back scheduler.HistoryEntry
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Duration != e.Duration || back.Token != e.Token || !back.Started.Equal(e.Started) {
		t.Errorf("round trip: got %+v, want %+v", back, e)
	}
}

// awaitHistory polls h until cond holds for task's entries (newest first).
func awaitHistory(t *testing.T, h scheduler.History, task, what string, cond func([]scheduler.HistoryEntry) bool) []scheduler.HistoryEntry {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		es, err := h.Recent(context.Background(), task, 100)
		if err != nil {
			t.Fatal(err)
		}
		if cond(es) {
			return es
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; history: %+v", what, es)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The scheduler records each attempt: a failure with its error, then the
// retry's success, with the slot facts of each.
func TestSchedulerRecordsAttempts(t *testing.T) {
	store := lock.NewMemory(nil)
	hist := scheduler.NewMemoryHistory(0)
	l := newLedger()
	task := testTask(t, "flaky", "@every 1s", l.job(func(_ context.Context, r tasks.Run) error {
		if r.Attempt == 1 {
			return errors.New("first attempt fails")
		}
		return nil
	}), nil)
	startReplica(t, "r1", store, time.Second, []scheduler.Task{task}, scheduler.WithHistory(hist))
	es := awaitHistory(t, hist, "flaky", "a failure and then a success of one slot", func(es []scheduler.HistoryEntry) bool {
		for _, e := range es {
			if e.Outcome == "success" && e.Attempt == 2 {
				return true
			}
		}
		return false
	})
	var fail, ok scheduler.HistoryEntry
	for _, e := range es {
		if e.Outcome == "success" && e.Attempt == 2 {
			ok = e
			break
		}
	}
	for _, e := range es {
		if e.Slot == ok.Slot && e.Attempt == 1 {
			fail = e
		}
	}
	if fail.Outcome != "failure" || !strings.Contains(fail.Error, "first attempt fails") {
		t.Errorf("attempt 1 of slot %s: %+v, want a failure with its error", ok.Slot, fail)
	}
	for _, e := range []scheduler.HistoryEntry{fail, ok} {
		if e.Replica != "r1" || e.Token != lock.Token(e.SlotTime, e.Attempt) || e.Started.Before(e.SlotTime) ||
			task.Schedule.SlotID(e.SlotTime) != e.Slot || e.Duration < 0 {
			t.Errorf("entry with wrong slot facts: %+v", e)
		}
	}
	if ok.Error != "" {
		t.Errorf("success recorded with error %q", ok.Error)
	}
}

// stuckHistory is a History whose appends hang until released, then fail.
type stuckHistory struct {
	called  chan struct{}
	release chan struct{}
}

func (h *stuckHistory) Append(ctx context.Context, _ string, _ scheduler.HistoryEntry) error {
	select {
	case h.called <- struct{}{}:
	default:
	}
	select {
	case <-h.release:
	case <-ctx.Done():
	}
	return errors.New("history down")
}

func (h *stuckHistory) Recent(context.Context, string, int) ([]scheduler.HistoryEntry, error) {
	return nil, nil
}

// A history that hangs and fails neither holds up nor fails the slot: the
// next slot runs while the first append still hangs.
func TestHistoryFailureDoesNotHoldSlot(t *testing.T) {
	store := lock.NewMemory(nil)
	hist := &stuckHistory{called: make(chan struct{}, 1), release: make(chan struct{})}
	l := newLedger()
	task := testTask(t, "tick", "@every 1s", l.job(ok), nil)
	r := startReplica(t, "r1", store, time.Second, []scheduler.Task{task}, scheduler.WithHistory(hist))
	defer close(hist.release) // before the replica's cleanup stops it
	select {
	case <-hist.called:
	case <-time.After(10 * time.Second):
		t.Fatal("no append within 10s")
	}
	rs := l.await(t, "two completed slots", 10*time.Second, func(rs []record) bool {
		n := 0
		for _, r := range rs {
			if r.done && r.err == nil {
				n++
			}
		}
		return n >= 2
	})
	// The ledger records a run when the task returns; the replica marks
	// the slot done and counts the success just after, so await those.
	var (
		st      lock.State
		err     error
		success float64
	)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		st, err = store.State(context.Background(), task.Slot(rs[0].run.SlotTime))
		success = value(t, r.sched, "slotd_runs_total", "tick", "success")
		if err == nil && st.Status == "done" && success >= 2 {
			return
		}
	}
	t.Errorf("with a hanging history, after 10s: slot %s state %+v, %v (want done); slotd_runs_total{outcome=success} = %v (want >= 2)",
		rs[0].run.Slot, st, err, success)
}
