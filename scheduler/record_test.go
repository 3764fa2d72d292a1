package scheduler_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/lock/redislock"
	"github.com/slotd/slotd/scheduler"
	"github.com/slotd/slotd/tasks"
)

// xadds counts the XADDs and script calls a client sends of its own (not
// those a script makes inside Redis).
type xadds struct{ xadd, eval atomic.Int64 }

func (h *xadds) note(c redis.Cmder) {
	switch c.Name() {
	case "xadd":
		h.xadd.Add(1)
	case "evalsha", "eval":
		h.eval.Add(1)
	}
}

func (h *xadds) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *xadds) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, c redis.Cmder) error { h.note(c); return next(ctx, c) }
}

func (h *xadds) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cs []redis.Cmder) error {
		for _, c := range cs {
			h.note(c)
		}
		return next(ctx, cs)
	}
}

// On one Redis server a success's history entry is appended by its
// completion's own script: every slot two replicas run has its one
// success entry, and no replica sends an XADD of its own.
func TestSuccessRecordedByItsCompletion(t *testing.T) {
	srv := redistest.Start(t)
	var count xadds
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	rdb.AddHook(&count)
	t.Cleanup(func() { rdb.Close() })
	l := newLedger()
	task := testTask(t, "every-second", "@every 1s", l.job(func(context.Context, tasks.Run) error { return nil }), nil)
	var hist *redislock.History
	for _, name := range []string{"r1", "r2"} {
		s, h := redislock.Open(rdb, redislock.Config{Prefix: "slotd", HistoryTTL: time.Hour})
		t.Cleanup(func() { h.Close(); s.Close() })
		startReplica(t, name, s, time.Second, []scheduler.Task{task}, scheduler.WithHistory(h))
		hist = h
	}
	const slots = 3
	es := awaitHistory(t, hist, "every-second", "3 slots' successes", func(es []scheduler.HistoryEntry) bool {
		return len(es) >= slots
	})
	seen := map[string]int{}
	for _, e := range es {
		if e.Outcome != "success" || e.Error != "" || e.Token == 0 || e.Replica == "" {
			t.Errorf("entry %+v: want a success with its slot facts", e)
		}
		seen[e.Slot]++
	}
	for slot, n := range seen {
		if n != 1 {
			t.Errorf("slot %s has %d entries, want 1", slot, n)
		}
	}
	if n := count.xadd.Load(); n != 0 {
		t.Errorf("the replicas sent %d XADDs of their own: the entries were not appended by the completions", n)
	}
	if count.eval.Load() == 0 {
		t.Error("no script call seen: the hook counted nothing")
	}
}
