package scheduler_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/testlane"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/memlock"
	"github.com/slotd/slotd/scheduler"
	"github.com/slotd/slotd/scheduler/history"
	"github.com/slotd/slotd/tasks"
)

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
	store := memlock.New(nil)
	hist := history.NewMemory(0)
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
	testlane.Parallel(t, lightLane)
	store := memlock.New(nil)
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
		st, err = lock.ReadState(context.Background(), store, task.Slot(rs[0].run.SlotTime))
		success = value(t, r.sched, "slotd_runs_total", "tick", "success")
		if err == nil && st.Status == "done" && success >= 2 {
			return
		}
	}
	t.Errorf("with a hanging history, after 10s: slot %s state %+v, %v (want done); slotd_runs_total{outcome=success} = %v (want >= 2)",
		rs[0].run.Slot, st, err, success)
}
