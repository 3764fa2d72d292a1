package scheduler_test

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/memlock"
	"github.com/slotd/slotd/lock/redislock"
	"github.com/slotd/slotd/scheduler"
	"github.com/slotd/slotd/scheduler/schedule"
	"github.com/slotd/slotd/tasks"
)

// BenchmarkReplicaSlot measures what a slot costs one replica's engine,
// the part of issue 18's third target that a single process can show
// (the load tool measures three replicas and Redis together): the CPU of
// this process (user + system, getrusage) and its heap allocations per slot
// run, with a no-op task, n tasks due every second, after two seconds of
// warm-up. Each iteration is one second of slots, so -benchtime Nx runs N
// seconds. On the embedded store the figure is the engine alone; on Redis
// it adds the client (go-redis, the scripts' arguments and replies, the
// notices) but not the server, a process of its own.
//
//	go test -run '^$' -bench ReplicaSlot -benchtime 5x ./scheduler/
func BenchmarkReplicaSlot(b *testing.B) {
	const n = 2000
	for _, backend := range []string{"memory", "redis"} {
		b.Run(fmt.Sprintf("%s/%d-tasks", backend, n), func(b *testing.B) {
			var store lock.Store
			if backend == "memory" {
				store = memlock.New(nil)
			} else {
				r := redislock.New(redistest.Start(b).Client(), "slotd")
				if err := r.Subscribe(context.Background()); err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { r.Close() })
				store = r
			}
			var ran atomic.Int64
			job := tasks.TaskFunc(func(context.Context) error { ran.Add(1); return nil })
			every, err := schedule.Parse("* * * * * *", "")
			if err != nil {
				b.Fatal(err)
			}
			ts := make([]scheduler.Task, n)
			for i := range ts {
				ts[i] = scheduler.Task{
					Name: fmt.Sprintf("tick-%05d", i), Spec: "* * * * * *", Plugin: "noop", Params: map[string]any{},
					Policy:  lock.Policy{Lease: 15 * time.Second, DoneTTL: time.Minute, MaxAttempts: 3},
					Timeout: time.Minute, Catchup: scheduler.CatchupNone, Schedule: every, Job: job,
				}
			}
			log := slog.New(slog.DiscardHandler)
			s := scheduler.New(ts, store, scheduler.WithLogger(log), scheduler.WithReplica("r1"))
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- s.Run(ctx) }()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					b.Error(err)
				}
			}()
			await := func(count int64) {
				b.Helper()
				deadline := time.Now().Add(time.Duration(count/n+10) * time.Second)
				for ran.Load() < count {
					if time.Now().After(deadline) {
						b.Fatalf("%d slots ran, want %d: the replica does not keep up", ran.Load(), count)
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
			await(2 * n)
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			cpu0, from := cpuTime(b), ran.Load()
			b.ResetTimer()
			await(from + int64(b.N)*n)
			b.StopTimer()
			cpu1, to := cpuTime(b), ran.Load()
			runtime.ReadMemStats(&m1)
			slots := float64(to - from)
			b.ReportMetric(float64((cpu1-cpu0).Microseconds())/slots, "cpu-µs/slot")
			b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/slots, "allocs/slot")
			b.ReportMetric(float64(m1.TotalAlloc-m0.TotalAlloc)/slots, "B/slot")
		})
	}
}

// cpuTime is this process's CPU time so far (user + system).
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
