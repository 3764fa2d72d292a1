package scheduler_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/observe"
	"github.com/slotd/slotd/internal/stats"
	"github.com/slotd/slotd/internal/testlane"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/memlock"
	"github.com/slotd/slotd/scheduler"
	"github.com/slotd/slotd/scheduler/history"
	"github.com/slotd/slotd/tasks"
)

// skipIndex is reason's index in Task.Skipped.
func skipIndex(t *testing.T, reason string) int {
	t.Helper()
	for i, r := range stats.SkipReasons {
		if r == reason {
			return i
		}
	}
	t.Fatalf("no skip reason %q", reason)
	return -1
}

// queueFleet starts three replicas of task over stores (one store per
// replica, or one shared) and returns them.
func queueFleet(t *testing.T, stores []lock.Store, task scheduler.Task, hist scheduler.History) []*replica {
	var reps []*replica
	for i := range 3 {
		reps = append(reps, startReplica(t, fmt.Sprintf("r%d", i), stores[i%len(stores)], time.Second, []scheduler.Task{task}, scheduler.WithHistory(hist)))
	}
	return reps
}

// blocker is a task whose first run blocks until release, and that
// counts the runs under way at once.
type blocker struct {
	release  chan struct{}
	once     sync.Once
	running  atomic.Int32
	overlaps atomic.Int32
	mu       sync.Mutex
	ended    time.Time // when the blocked run returned
}

func (b *blocker) body(ctx context.Context, _ tasks.Run) error {
	if b.running.Add(1) > 1 {
		b.overlaps.Add(1)
	}
	defer b.running.Add(-1)
	block := false
	b.once.Do(func() { block = true })
	if block {
		select {
		case <-b.release:
		case <-ctx.Done(): // a failed test stops the replicas: no hang
		}
		b.mu.Lock()
		b.ended = time.Now()
		b.mu.Unlock()
	}
	return nil
}

func waiting(reps []*replica, task string) int64 {
	var n int64
	for _, r := range reps {
		n += r.sched.Stats().Task(task).Waiting.Load()
	}
	return n
}

// queue: while a slot runs, one later slot waits (fleet-wide), the others
// are skipped with reason queue_full; the waiter starts as soon as the
// running slot ends, never beside it.
func TestQueueWaiterStartsAfterHolder(t *testing.T) {
	testlane.Parallel(t, lightLane)
	for _, tc := range []struct {
		name   string
		stores func(t *testing.T) []lock.Store
	}{
		{"redis", func(t *testing.T) []lock.Store { return redisStores(t, 3) }},
		{"memory", func(t *testing.T) []lock.Store { return []lock.Store{memlock.New(nil)} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			queueWaiterStartsAfterHolder(t, tc.stores(t))
		})
	}
}

// queueWaiterStartsAfterHolder runs three replicas of a queued task over
// stores: while the first slot runs, exactly one later slot waits in the
// fleet and at least two are skipped queue_full; the waiter starts within
// a second of the run's end, never beside it.
func queueWaiterStartsAfterHolder(t *testing.T, stores []lock.Store) {
	l := newLedger()
	hist := history.NewMemory(0)
	b := &blocker{release: make(chan struct{})}
	task := testTask(t, "tick", "@every 1s", l.job(b.body), func(t *scheduler.Task) {
		t.Concurrency = scheduler.ConcurrencyQueue
		t.Deadline = time.Minute
	})
	reps := queueFleet(t, stores, task, hist)
	unblock := sync.OnceFunc(func() { close(b.release) })
	t.Cleanup(unblock)
	l.await(t, "the long run", 20*time.Second, func(rs []record) bool { return len(rs) == 1 })
	es := awaitHistory(t, hist, task.Name, "two slots dropped as queue_full", func(es []scheduler.HistoryEntry) bool {
		n := 0
		for _, e := range es {
			if e.Outcome == stats.OutcomeSkippedQueue {
				n++
			}
		}
		return n >= 2
	})
	if n := waiting(reps, task.Name); n != 1 {
		t.Errorf("slots waiting in the fleet: %d, want 1", n)
	}
	var shown []string // the waiting slot each replica's task page shows
	for _, r := range reps {
		if id := r.sched.Stats().Task(task.Name).WaitingSlot.Load(); id != nil {
			shown = append(shown, *id)
		}
	}
	if len(shown) != 1 {
		t.Errorf("replicas showing a waiting slot: %v, want one", shown)
	}
	var full uint64
	for _, r := range reps {
		full += r.sched.Stats().Task(task.Name).Skipped[skipIndex(t, stats.SkipQueueFull)].Load()
	}
	if full < 2 {
		t.Errorf("skipped{reason=queue_full} = %d, want >= 2; history %+v", full, es)
	}
	if rs := l.snapshot(); len(rs) != 1 {
		t.Fatalf("a slot ran beside the running one:\n%s", dump(rs))
	}
	unblock()
	rs := l.await(t, "the waiting slot's run", 10*time.Second, func(rs []record) bool { return len(rs) >= 2 })
	b.mu.Lock()
	ended := b.ended
	b.mu.Unlock()
	after := rs[1].started.Sub(ended)
	t.Logf("the waiting slot %s started %v after the running one ended", rs[1].run.Slot, after)
	// It polls every 50 ms (125 ms measured on a quiet machine); the bound
	// leaves room for a loaded one (1.2 s at a load of 20).
	if after < 0 || after > 3*time.Second {
		t.Errorf("waiting slot started %v after the running one ended; want within 3 s", after)
	}
	if n := b.overlaps.Load(); n != 0 {
		t.Errorf("%d runs started beside another", n)
	}
}

// On etcd and ZooKeeper (three members, three replicas), as on Redis: one
// slot waits fleet-wide while the task's slot runs, the others are
// skipped queue_full, and the waiter starts after the run ends.
func TestConsensusQueueWaiterStartsAfterHolder(t *testing.T) {
	testlane.Parallel(t, heavyLane)
	for _, kind := range consensusKinds {
		t.Run(kind, func(t *testing.T) { queueWaiterStartsAfterHolder(t, consensusStores(t, kind, 3).stores) })
	}
}

// On etcd and ZooKeeper, the replica running the task's slot is cut off
// its store, as by a kill -9, while a later slot waits: a slot of the task
// runs again on a live replica once the holder's records end with its
// lease, never beside the holder's run. (If the waiter was on the cut-off
// replica too, a later slot waits once its waiting record has ended.)
func TestConsensusQueueAfterHolderKilled(t *testing.T) {
	testlane.Parallel(t, heavyLane)
	for _, kind := range consensusKinds {
		t.Run(kind, func(t *testing.T) {
			c := consensusStores(t, kind, 3)
			l := newLedger()
			b := &blocker{release: make(chan struct{})}
			t.Cleanup(func() { close(b.release) })
			task := testTask(t, "tick", "@every 1s", l.job(b.body), func(t *scheduler.Task) {
				t.Concurrency = scheduler.ConcurrencyQueue
				t.Deadline = time.Minute
				t.Policy.MaxAttempts = 1
			})
			reps := queueFleet(t, c.stores, task, history.NewMemory(0))
			rs := l.await(t, "the long run", 20*time.Second, func(rs []record) bool { return len(rs) == 1 })
			holder := -1
			for i, r := range reps {
				if r.name == rs[0].run.Replica {
					holder = i
				}
			}
			if holder < 0 {
				t.Fatalf("run on unknown replica %q", rs[0].run.Replica)
			}
			await(t, "a slot waiting for the long run", 20*time.Second, func() bool { return waiting(reps, task.Name) == 1 })
			onHolder := reps[holder].sched.Stats().Task(task.Name).Waiting.Load() == 1
			killed := time.Now()
			c.crash[holder]()
			rs = l.await(t, "a run after the killed holder's", 30*time.Second, func(rs []record) bool { return len(rs) >= 2 })
			b.mu.Lock()
			ended := b.ended
			b.mu.Unlock()
			if ended.IsZero() || rs[1].started.Before(ended) {
				t.Fatalf("slot %s started at %v beside the killed holder's run (ended %v):\n%s", rs[1].run.Slot, rs[1].started, ended, dump(rs))
			}
			if rs[1].run.Replica == reps[holder].name {
				t.Fatalf("the cut-off replica ran again:\n%s", dump(rs))
			}
			if n := b.overlaps.Load(); n != 0 {
				t.Errorf("%d runs started beside another", n)
			}
			t.Logf("%s: slot %s ran %v after the holder was cut off (lease %v; the waiter was on the holder: %v)",
				kind, rs[1].run.Slot, rs[1].started.Sub(killed).Round(time.Millisecond), task.Lease, onHolder)
			if d := rs[1].started.Sub(killed); d > task.Lease+3*time.Second {
				t.Errorf("next run %v after the kill, want within the lease (%v) and a few polls", d, task.Lease)
			}
		})
	}
}

// queue: a slot whose window closes while it waits is not run; it is
// missed (reason queue), not skipped: the policy meant it to run. Its slot
// is marked done so that no peer claims it; it is counted once in the
// fleet (slotd_slots_missed_total, _missed_queue_total), recorded as
// missed_queue, shown missed, and the on_failure hook runs once for it.
func TestQueueWindowClosesWhileWaitingIsMissed(t *testing.T) {
	testlane.Parallel(t, lightLane)
	stores := redisStores(t, 3)
	l := newLedger()
	hist := history.NewMemory(0)
	b := &blocker{release: make(chan struct{})}
	out := filepath.Join(t.TempDir(), "hook.out")
	h := hook(t, "exec", map[string]any{"command": []any{"/bin/sh", "-c",
		`printf '%s|%s|%s\n' "$SLOTD_FAILURE" "$SLOTD_FAILURE_REASON" "$SLOTD_SLOT" >> "$OUT"`},
		"env": map[string]any{"OUT": out}}, 10*time.Second)
	task := testTask(t, "tick", "@every 1s", l.job(b.body), func(t *scheduler.Task) {
		t.Concurrency = scheduler.ConcurrencyQueue
		t.Deadline = 1500 * time.Millisecond
		t.OnFailure = h
	})
	reps := queueFleet(t, stores, task, hist)
	unblock := sync.OnceFunc(func() { close(b.release) })
	t.Cleanup(unblock)
	ctx := context.Background()
	var missed scheduler.HistoryEntry
	awaitHistory(t, hist, task.Name, "a slot whose window closed while it waited", func(es []scheduler.HistoryEntry) bool {
		for _, e := range es {
			if e.Outcome == stats.OutcomeMissedQueue && strings.Contains(e.Error, "window closed") {
				if st, err := lock.ReadState(ctx, stores[0], lock.Slot{Task: task.Name, ID: e.Slot}); err == nil && st.Status == "done" {
					missed = e
					return true
				}
			}
		}
		return false
	})
	line := "missed|queue|" + missed.Slot + "\n"
	await(t, "the on_failure hook of slot "+missed.Slot, 10*time.Second, func() bool {
		b, _ := os.ReadFile(out)
		return strings.Contains(string(b), line)
	})
	var n, nq uint64
	for _, r := range reps {
		st := r.sched.Stats().Task(task.Name)
		n += st.Missed.Load()
		nq += st.MissedQueue.Load()
	}
	if nq == 0 || n < nq {
		t.Errorf("missed %d, of them for the queue %d; want >= 1, and all counted as missed", n, nq)
	}
	sts, err := observe.Status(ctx, []scheduler.Task{task}, stores[0], hist, time.Now(), 10)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, ss := range sts[0].Slots {
		if ss.ID == missed.Slot {
			found = true
			if ss.Phase != observe.PhaseMissed {
				t.Errorf("slot %s shown %q, want %q", ss.ID, ss.Phase, observe.PhaseMissed)
			}
		}
	}
	if !found {
		t.Errorf("slot %s not in the task's status %+v", missed.Slot, sts[0].Slots)
	}
	if rs := l.snapshot(); len(rs) != 1 {
		t.Fatalf("a slot ran beside the running one:\n%s", dump(rs))
	}
	b2, _ := os.ReadFile(out)
	if c := strings.Count(string(b2), line); c != 1 {
		t.Errorf("the hook ran %d times for slot %s, want once:\n%s", c, missed.Slot, b2)
	}
	t.Logf("missed: %+v", missed)
}

// queue: a slot that fires while another slot of its task waits is
// skipped queue_full even when no slot of the task runs at that moment:
// the waiting slot starts next, and a newcomer cannot take the running
// record the instant it is freed, ahead of it. A waiting record held by no
// replica of the test stands for a waiter that has not yet seen the
// running record free.
func TestQueueSlotDoesNotPassTheWaiter(t *testing.T) {
	testlane.Parallel(t, lightLane)
	for _, tc := range []struct {
		name   string
		stores func(t *testing.T) []lock.Store
	}{
		{"redis", func(t *testing.T) []lock.Store { return redisStores(t, 3) }},
		{"memory", func(t *testing.T) []lock.Store { return []lock.Store{memlock.New(nil)} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			stores := tc.stores(t)
			controls := stores[0].(lock.Controls)
			l := newLedger()
			hist := history.NewMemory(0)
			task := testTask(t, "tick", "@every 1s", l.job(func(context.Context, tasks.Run) error { return nil }), func(t *scheduler.Task) {
				t.Concurrency = scheduler.ConcurrencyQueue
			})
			now := time.Now()
			ghost := lock.Slot{Task: task.Name + "~waiting", ID: "20000101000000", Time: now, Deadline: now.Add(time.Minute)}
			owner := lock.Owner{ID: "elsewhere#1", Attempt: 1}
			ctx := context.Background()
			if o, err := controls.Occupy(ctx, ghost, owner, time.Minute, false); err != nil || !o.Taken {
				t.Fatalf("occupy the waiting record: %+v, %v", o, err)
			}
			queueFleet(t, stores, task, hist)
			es := awaitHistory(t, hist, task.Name, "a slot skipped as queue_full beside no running slot", func(es []scheduler.HistoryEntry) bool {
				for _, e := range es {
					if e.Outcome == stats.OutcomeSkippedQueue && strings.Contains(e.Error, "already waits") {
						return true
					}
				}
				return false
			})
			if rs := l.snapshot(); len(rs) != 0 {
				t.Fatalf("a slot ran ahead of the waiting one:\n%s\nhistory %+v", dump(rs), es)
			}
			if err := controls.Vacate(ctx, ghost, owner); err != nil {
				t.Fatal(err)
			}
			l.await(t, "a run once nothing waits", 10*time.Second, func(rs []record) bool { return len(rs) > 0 })
		})
	}
}
