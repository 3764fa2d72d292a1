package scheduler_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/internal/testlane"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/redislock"
	"github.com/slotd/slotd/scheduler"
	"github.com/slotd/slotd/scheduler/history"
	"github.com/slotd/slotd/tasks"
)

// Redis refuses writes (maxmemory reached) from the moment attempt 1's task
// ends until three leases later: renewals (PEXPIRE) still pass, completing
// (SET) and claiming (INCR) do not. The holder keeps its lease and retries
// the completion until Redis takes writes again; the slot ends done by
// attempt 1, recorded as a success, and the peer never starts attempt 2.
func TestCompleteRetriedThroughOOM(t *testing.T) {
	testlane.Parallel(t, lightLane)
	srv := redistest.Start(t)
	rdb := srv.Client()
	defer rdb.Close()
	var stores []lock.Store
	for range 2 {
		r := redislock.New(srv.Client(), "slotd")
		if err := r.Subscribe(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		stores = append(stores, r)
	}
	const lease = time.Second
	l := newLedger()
	var liftedAt atomic.Pointer[time.Time]
	job := l.job(func(ctx context.Context, r tasks.Run) error {
		if r.Attempt != 1 {
			return nil
		}
		if err := rdb.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
			return err
		}
		time.AfterFunc(3*lease, func() {
			if err := rdb.ConfigSet(context.Background(), "maxmemory", "0").Err(); err != nil {
				t.Errorf("lifting maxmemory: %v", err)
			}
			now := time.Now()
			liftedAt.Store(&now)
		})
		return nil
	})
	task := testTask(t, "oom", "0 * * * *", job, func(t *scheduler.Task) {
		t.Catchup = scheduler.CatchupLatest
		t.Lease = lease
	})
	hist := history.NewMemory(0)
	for _, name := range []string{"a", "b"} {
		startReplica(t, name, stores[name[0]-'a'], time.Second, []scheduler.Task{task}, scheduler.WithHistory(hist))
	}
	es := awaitHistory(t, hist, "oom", "attempt 1's entry", func(es []scheduler.HistoryEntry) bool { return len(es) > 0 })
	lifted := liftedAt.Load()
	if lifted == nil {
		t.Fatalf("attempt 1 recorded %+v before Redis took writes again: the completion was not retried", es[0])
	}
	if e := es[0]; e.Outcome != "success" || e.Attempt != 1 {
		t.Fatalf("attempt 1 recorded as %q (attempt %d, %s), want success", e.Outcome, e.Attempt, e.Error)
	}
	// Past the lease and the peer's claim backoff: a peer that could claim
	// the slot would have started attempt 2 by now.
	time.Sleep(2 * lease)
	slot := task.Slot(es[0].SlotTime) // not the hour now: it may have turned
	st, err := lock.ReadState(context.Background(), stores[0], slot)
	if err != nil || st.Status != "done" || st.Attempt != 1 {
		t.Fatalf("slot state %+v, %v; want done by attempt 1", st, err)
	}
	if rs := l.snapshot(); len(rs) != 1 {
		t.Fatalf("the slot ran %d times, want once:\n%s", len(rs), dump(rs))
	}
	if es, _ := hist.Recent(context.Background(), "oom", 10); len(es) != 1 {
		t.Fatalf("%d history entries, want 1: %+v", len(es), es)
	}
}
