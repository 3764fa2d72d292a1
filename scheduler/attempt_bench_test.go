package scheduler

import (
	"context"
	"log/slog"
	"runtime/metrics"
	"strconv"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/memlock"
	"github.com/slotd/slotd/lock/redislock"
	"github.com/slotd/slotd/scheduler/schedule"
	"github.com/slotd/slotd/tasks"
)

// BenchmarkWonAttempt measures the won attempt's path alone, what one
// attempt costs between its won claim and its end: the lease and its
// watchdog, the task's contexts, a no-op task, the completion and its
// history entry (one script on one Redis server). The claims are won
// before the timer starts. Besides time, allocations and bytes per
// attempt, it reports the goroutines each attempt started on top of the
// one it runs on (the engine starts that one, startAttempt).
//
//	go test -run '^$' -bench WonAttempt -benchmem ./scheduler/
func BenchmarkWonAttempt(b *testing.B) {
	for _, backend := range []string{"memory", "redis"} {
		b.Run(backend, func(b *testing.B) {
			var store lock.Store
			var hist History
			if backend == "memory" {
				store, hist = memlock.Open()
			} else {
				st, h := redislock.Open(redistest.Start(b).Client(), redislock.Config{Prefix: "slotd", HistoryTTL: time.Hour})
				b.Cleanup(func() { h.Close(); st.Close() })
				store, hist = st, h
			}
			every, err := schedule.Parse("* * * * * *", "")
			if err != nil {
				b.Fatal(err)
			}
			noop := tasks.TaskFunc(func(context.Context) error { return nil })
			s := New([]Task{{
				Name: "noop", Spec: "* * * * * *", Plugin: "noop", Params: map[string]any{},
				Policy:  lock.Policy{Lease: 15 * time.Second, DoneTTL: time.Minute, MaxAttempts: 3},
				Timeout: time.Minute, Catchup: CatchupNone, Schedule: every, Job: noop,
			}}, store, WithLogger(slog.New(slog.DiscardHandler)), WithReplica("r1"), WithHistory(hist))
			t := &s.Tasks()[0]
			ctx := context.Background()
			// Every slot is due, its window open for as long as a run takes.
			at := time.Now().Truncate(time.Second).Add(-time.Minute)
			slots, claims := make([]lock.Slot, b.N), make([]lock.Claim, b.N)
			for i := range b.N {
				slots[i] = lock.Slot{Task: t.Name, ID: "b" + strconv.Itoa(i), Time: at, Deadline: at.Add(time.Hour)}
				c, err := store.Claim(ctx, slots[i], s.owner, t.Policy)
				if err != nil || c.Result != lock.Won {
					b.Fatalf("claim %s: %v, %v", slots[i], c.Result, err)
				}
				claims[i] = c
			}
			g0 := goroutinesCreated()
			b.ResetTimer()
			for i := range b.N {
				if finished, failed := s.newAttempt(t, slots[i], claims[i]).run(ctx, ctx); !finished || failed != nil {
					b.Fatalf("attempt %d: finished %v, failed %+v", i, finished, failed)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(goroutinesCreated()-g0)/float64(b.N), "goroutines/op")
		})
	}
}

// goroutinesCreated is how many goroutines this process has started.
func goroutinesCreated() uint64 {
	m := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(m)
	return m[0].Value.Uint64()
}
