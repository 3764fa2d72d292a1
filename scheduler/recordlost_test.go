package scheduler_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/stats"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/memlock"
	"github.com/slotd/slotd/scheduler"
	"github.com/slotd/slotd/scheduler/history"
	"github.com/slotd/slotd/tasks"
)

// failingRecord is a store whose renewals of the running record of slot
// failSlot of task fail, with an error of unknown outcome (as a timeout):
// the record is left unrenewed in the store, to run out with its TTL,
// while the slot's own renewals pass. written is the send time of the
// last write of each slot's record the store confirmed: the record lives
// in the store at least a lease after it.
type failingRecord struct {
	lock.Store
	lock.Controls
	task     string
	failSlot atomic.Pointer[string]

	mu      sync.Mutex
	written map[string]time.Time
}

var errInjected = errors.New("injected: the running record's renewal timed out")

func newFailingRecord(t *testing.T, s lock.Store, task string) *failingRecord {
	return &failingRecord{Store: s, Controls: controls(t, s), task: task, written: map[string]time.Time{}}
}

func (f *failingRecord) wrote(slot lock.Slot, sent time.Time) {
	if slot.Task != f.task {
		return // the queue's waiting record
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.written[slot.ID] = sent
}

func (f *failingRecord) lastWrite(slot string) (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.written[slot]
	return t, ok
}

func (f *failingRecord) Occupy(ctx context.Context, slot lock.Slot, owner lock.Owner, lease time.Duration, replace bool) (lock.Occupancy, error) {
	sent := time.Now()
	o, err := f.Controls.Occupy(ctx, slot, owner, lease, replace)
	if err == nil && o.Taken {
		f.wrote(slot, sent)
	}
	return o, err
}

func (f *failingRecord) RenewOccupancy(ctx context.Context, slot lock.Slot, owner lock.Owner, lease time.Duration) error {
	if p := f.failSlot.Load(); p != nil && slot.Task == f.task && slot.ID == *p {
		return errInjected
	}
	sent := time.Now()
	err := f.Controls.RenewOccupancy(ctx, slot, owner, lease)
	if err == nil {
		f.wrote(slot, sent)
	}
	return err
}

// forbid, with the running record's renewals failing while the slot's
// pass (docs/model.md's former known limit, ctl-strict-forbid): the
// holder's task is cancelled with ErrRecordLost, with no grace, before its
// record can run out in the store, and recorded record_lost; the next
// slot of the task starts only after it stopped. Before, the task ran on,
// its record ran out, and the next slot started beside it.
func TestRecordLostCancelsForbid(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"memory", "redis"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			var store lock.Store
			if kind == "memory" {
				store = memlock.New(nil)
			} else {
				store = redisStores(t, 1)[0]
			}
			recordLostCancels(t, store, scheduler.ConcurrencyForbid)
		})
	}
}

// replace and queue keep their running record the same way: under
// replace, the next slot replaces the record, but the holder, whose
// renewals fail, never hears it; before, the replacing slot gave up
// awaiting it after a lease and started beside it.
func TestRecordLostCancelsReplaceAndQueue(t *testing.T) {
	t.Parallel()
	for _, c := range []scheduler.Concurrency{scheduler.ConcurrencyReplace, scheduler.ConcurrencyQueue} {
		t.Run(string(c), func(t *testing.T) {
			t.Parallel()
			recordLostCancels(t, redisStores(t, 1)[0], c)
		})
	}
}

// recordLostCancels runs a task every second whose first run blocks
// until cancelled (or four leases), with that run's record renewals
// failing.
func recordLostCancels(t *testing.T, store lock.Store, concurrency scheduler.Concurrency) {
	const lease = 3 * time.Second
	l := newLedger()
	hist := history.NewMemory(0)
	var (
		firstTaken atomic.Bool
		mu         sync.Mutex
		firstEnd   time.Time
		firstCause error
	)
	var fs *failingRecord
	job := l.job(func(ctx context.Context, r tasks.Run) error {
		if !firstTaken.CompareAndSwap(false, true) {
			return nil
		}
		fs.failSlot.Store(&r.Slot) // from here on, this run's record renewals fail
		select {
		case <-ctx.Done():
		case <-time.After(4 * lease): // the old code: never cancelled
		}
		mu.Lock()
		firstEnd, firstCause = time.Now(), context.Cause(ctx)
		mu.Unlock()
		return ctx.Err()
	})
	task := testTask(t, "tick", "@every 1s", job, func(t *scheduler.Task) {
		t.Concurrency = concurrency
		t.Lease = lease
	})
	fs = newFailingRecord(t, store, task.Name)
	r := startReplica(t, "r1", fs, time.Second, []scheduler.Task{task}, scheduler.WithHistory(hist))

	rs := l.await(t, "the first run's end and a later run", 30*time.Second, func(rs []record) bool {
		return len(rs) >= 2 && rs[0].done
	})
	first := rs[0]
	mu.Lock()
	end, cause := firstEnd, firstCause
	mu.Unlock()
	if !errors.Is(cause, scheduler.ErrRecordLost) || !errors.Is(cause, tasks.ErrNoGrace) {
		t.Errorf("the first task's cause = %v, want ErrRecordLost with ErrNoGrace", cause)
	}
	written, ok := fs.lastWrite(first.run.Slot)
	if !ok {
		t.Fatal("no write of the first run's record seen")
	}
	t.Logf("the first task stopped %v after its record's last confirmed write (lease %v)", end.Sub(written), lease)
	if runsOut := written.Add(lease); !end.Before(runsOut) {
		t.Errorf("the first task stopped %v after its record could run out in the store", end.Sub(runsOut))
	}
	for _, later := range rs[1:] {
		if later.started.Before(end) {
			t.Errorf("slot %s started at %v, before the first run (slot %s) stopped at %v:\n%s",
				later.run.Slot, later.started.Format("15:04:05.000"), first.run.Slot, end.Format("15:04:05.000"), dump(rs))
		}
	}
	es := awaitHistory(t, hist, task.Name, "the first slot's record_lost entry", func(es []scheduler.HistoryEntry) bool {
		return slices.ContainsFunc(es, func(e scheduler.HistoryEntry) bool { return e.Outcome == stats.OutcomeRecordLost })
	})
	for _, e := range es {
		if e.Outcome == stats.OutcomeRecordLost && e.Slot != first.run.Slot {
			t.Errorf("slot %s recorded record_lost, want only slot %s: %+v", e.Slot, first.run.Slot, es)
		}
	}
	i := slices.Index(stats.Outcomes[:], stats.OutcomeRecordLost)
	if n := r.sched.Stats().Task(task.Name).Runs[i].Load(); n != 1 {
		t.Errorf("slotd_runs_total{outcome=record_lost} = %d, want 1", n)
	}
}

// The same on the consensus stores and Redlock, whose records are kv
// entries (lock/internal/kv) with a TTL of their own.
func TestConsensusRecordLostCancelsForbid(t *testing.T) {
	for _, kind := range consensusKinds {
		t.Run(kind, func(t *testing.T) {
			recordLostCancels(t, consensusStores(t, kind, 1).stores[0], scheduler.ConcurrencyForbid)
		})
	}
}
