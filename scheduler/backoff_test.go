package scheduler_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/memlock"
	"github.com/slotd/slotd/retry"
	"github.com/slotd/slotd/scheduler"
	"github.com/slotd/slotd/tasks"
)

// failedAt records when each failed attempt of a task returned, by slot
// and attempt: its release, and the backoff's start by the store's clock,
// come after.
type failedAt struct {
	mu sync.Mutex
	at map[string]time.Time // "<slot>#<attempt>"
}

func (f *failedAt) fail(r tasks.Run) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.at == nil {
		f.at = map[string]time.Time{}
	}
	f.at[fmt.Sprintf("%s#%d", r.Slot, r.Attempt)] = time.Now()
	return fmt.Errorf("attempt %d fails", r.Attempt)
}

func (f *failedAt) get(slot string, attempt int) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.at[fmt.Sprintf("%s#%d", slot, attempt)]
}

// Three replicas on one redis-server race for a task whose first two
// attempts of a slot fail: each next attempt, on whichever replica wins
// it, starts no sooner than the task's retry backoff after the failed one
// ended (redis-server's clock is this host's), where without one a peer
// retries about 20 ms later.
func TestRetryBackoffSpacesAttemptsAcrossReplicas(t *testing.T) {
	testRetryBackoffSpaces(t, redisStores(t, 3))
}

// The embedded store keeps the backoff too: its one replica waits it out
// between its own attempts.
func TestRetryBackoffOnTheEmbeddedStore(t *testing.T) {
	testRetryBackoffSpaces(t, []lock.Store{memlock.New(nil)})
}

func testRetryBackoffSpaces(t *testing.T, stores []lock.Store) {
	l := newLedger()
	var f failedAt
	task := testTask(t, "spaced", "0 * * * *", l.job(func(_ context.Context, r tasks.Run) error {
		if r.Attempt < 3 {
			return f.fail(r)
		}
		return nil
	}), func(t *scheduler.Task) {
		t.Catchup = scheduler.CatchupLatest
		t.RetryBackoff = retry.Backoff{Min: 400 * time.Millisecond, Max: 5 * time.Second, Factor: 2, Spread: 0.25}
	})
	for i, s := range stores {
		startReplica(t, fmt.Sprintf("r%d", i), s, time.Second, []scheduler.Task{task})
	}
	rs := l.await(t, "a slot's third attempt to succeed", 20*time.Second, func(rs []record) bool {
		for _, r := range rs {
			if r.run.Attempt == 3 && r.done {
				return true
			}
		}
		return false
	})
	var slot string
	for _, r := range rs {
		if r.run.Attempt == 3 {
			slot = r.run.Slot
		}
	}
	runs := bySlot(rs)[slot]
	if len(runs) != 3 {
		t.Fatalf("slot %s ran %d times, want 3:\n%s", slot, len(runs), dump(runs))
	}
	s := lock.Slot{Task: "spaced", ID: slot}
	for _, r := range runs[1:] {
		prev := r.run.Attempt - 1
		want := task.RetryDelay(s, lock.Claim{Attempt: prev})
		if min, max := 300*time.Millisecond*time.Duration(1<<(prev-1)), 500*time.Millisecond*time.Duration(1<<(prev-1)); want < min || want > max {
			t.Fatalf("RetryDelay after attempt %d = %v, want 400ms·2^%d ± 25%%", prev, want, prev-1)
		}
		if gap := r.started.Sub(f.get(slot, prev)); gap < want-time.Millisecond {
			t.Errorf("attempt %d started %v after attempt %d failed, want at least its backoff %v:\n%s", r.run.Attempt, gap, prev, want, dump(runs))
		}
	}
}

// A backoff that would end at or after the slot's deadline starts no
// attempt: every replica's claim is answered late at once, the slot is
// missed with reason "backoff" (the hook is told, once), and no attempt
// runs past the deadline.
func TestRetryBackoffNeverPassesDeadline(t *testing.T) {
	_, stores := notifyStores(t, 3)
	l := newLedger()
	var f failedAt
	var mu sync.Mutex
	var failures []tasks.Failure
	h := &scheduler.Hook{Plugin: "test", Params: map[string]any{}, Timeout: 5 * time.Second, Job: tasks.TaskFunc(func(ctx context.Context) error {
		fl, _ := tasks.FailureFrom(ctx)
		mu.Lock()
		failures = append(failures, fl)
		mu.Unlock()
		return nil
	})}
	task := testTask(t, "short", "@every 4s", l.job(func(_ context.Context, r tasks.Run) error { return f.fail(r) }), func(t *scheduler.Task) {
		t.Catchup = scheduler.CatchupLatest
		t.Deadline = 2500 * time.Millisecond
		t.MaxAttempts = 5
		// 300ms after attempt 1; 3s after attempt 2, past any deadline.
		t.RetryBackoff = retry.Backoff{Min: 300 * time.Millisecond, Max: time.Minute, Factor: 10}
		t.OnFailure = h
	})
	var reps []*replica
	for i, s := range stores {
		reps = append(reps, startReplica(t, fmt.Sprintf("r%d", i), s, time.Second, []scheduler.Task{task}))
	}
	rs := l.await(t, "a slot's second attempt to fail", 20*time.Second, func(rs []record) bool {
		for _, r := range rs {
			if r.run.Attempt == 2 && r.done {
				return true
			}
		}
		return false
	})
	var slot string
	var slotTime time.Time
	for _, r := range rs {
		if r.run.Attempt == 2 {
			slot, slotTime = r.run.Slot, r.run.SlotTime
			break
		}
	}
	// The hook runs when the slot is missed: before its deadline, since
	// the claims say so at once.
	deadline := slotTime.Add(task.Deadline)
	var got tasks.Failure
	for wait := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		mu.Lock()
		for _, fl := range failures {
			if fl.Slot == slot {
				got = fl
			}
		}
		mu.Unlock()
		if got.Slot != "" || time.Now().After(wait) {
			break
		}
	}
	if got.Kind != tasks.FailureMissed || got.Reason != tasks.ReasonBackoff {
		t.Fatalf("hook of slot %s = %+v, want missed with reason %q", slot, got, tasks.ReasonBackoff)
	}
	if now := time.Now(); !now.Before(deadline) {
		t.Logf("hook seen %v after the deadline (a loaded machine)", now.Sub(deadline))
	}
	var missed float64
	for _, r := range reps {
		missed += value(t, r.sched, "slotd_slots_missed_backoff_total", "short", "")
	}
	if missed < 1 {
		t.Errorf("slotd_slots_missed_backoff_total = %v over the replicas, want ≥ 1", missed)
	}
	for _, r := range reps {
		r.stop()
	}
	runs := bySlot(l.snapshot())[slot]
	if len(runs) != 2 {
		t.Fatalf("slot %s ran %d attempts, want 2 (the third could not start before the deadline):\n%s", slot, len(runs), dump(runs))
	}
	for _, r := range runs {
		if !r.started.Before(deadline) {
			t.Errorf("attempt %d started %v after the deadline", r.run.Attempt, r.started.Sub(deadline))
		}
	}
	mu.Lock()
	n := 0
	for _, fl := range failures {
		if fl.Slot == slot {
			n++
		}
	}
	mu.Unlock()
	if n != 1 {
		t.Errorf("the hook ran %d times for slot %s, want once", n, slot)
	}
}

// The backoff lives in the store: the replica that released the slot dies
// right after (its process gone: it holds nothing and writes nothing
// more), and replicas started afterwards, which never saw the failure,
// still wait for the not-before time before the next attempt.
func TestRetryBackoffSurvivesTheReleasersDeath(t *testing.T) {
	stores := redisStores(t, 3)
	l := newLedger()
	var f failedAt
	task := testTask(t, "orphan", "0 * * * *", l.job(func(_ context.Context, r tasks.Run) error {
		if r.Attempt == 1 {
			return f.fail(r)
		}
		return nil
	}), func(t *scheduler.Task) {
		t.Catchup = scheduler.CatchupLatest
		t.RetryBackoff = retry.Backoff{Min: 1500 * time.Millisecond, Max: time.Minute}
	})
	a := startReplica(t, "a", stores[0], time.Second, []scheduler.Task{task})
	rs := l.await(t, "attempt 1 to fail", 20*time.Second, func(rs []record) bool { return len(rs) > 0 && rs[0].done })
	s := lock.Slot{Task: "orphan", ID: rs[0].run.Slot}
	var st lock.State
	for wait := time.Now().Add(10 * time.Second); st.Status != "backoff"; time.Sleep(5 * time.Millisecond) {
		var err error
		if st, err = lock.ReadState(context.Background(), stores[1], s); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(wait) {
			t.Fatalf("no backoff in the store 10s after attempt 1 failed: %+v", st)
		}
	}
	a.stop()
	startReplica(t, "b", stores[1], time.Second, []scheduler.Task{task})
	startReplica(t, "c", stores[2], time.Second, []scheduler.Task{task})
	rs = l.await(t, "attempt 2", 20*time.Second, func(rs []record) bool { return len(rs) > 1 && rs[1].done })
	if rs[1].run.Slot != s.ID || rs[1].run.Attempt != 2 || rs[1].err != nil {
		t.Fatalf("second record = %+v, want slot %s attempt 2 succeeded:\n%s", rs[1].run, s.ID, dump(rs))
	}
	// The store's clock is this host's: not-before is in its milliseconds.
	if early := st.NotBefore.Sub(rs[1].started); early > time.Millisecond {
		t.Errorf("attempt 2 started %v before the backoff's end %v", early, st.NotBefore)
	}
	if gap := rs[1].started.Sub(f.get(s.ID, 1)); gap < 1500*time.Millisecond {
		t.Errorf("attempt 2 started %v after attempt 1 failed, want ≥ 1.5s", gap)
	}
}
