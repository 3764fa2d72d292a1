package scheduler_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/zktest"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/scheduler"
	"github.com/slotd/slotd/tasks"
)

// TestMeasureBurst measures, when SLOTD_MEASURE=1, how three in-process
// replicas on one store run a burst of N tasks due in the same second, on
// Redis (one server) and on ZooKeeper (a three-member ensemble), both on
// this machine: the start delay of the tasks (p50, p99, max, from the slot
// time) and how long until the last one ended, for the second burst (the
// first warms connections and sessions up). The figures are printed, not
// asserted; every slot must run once.
//
//	SLOTD_MEASURE=1 go test -count=1 -run TestMeasureBurst -v -timeout 20m ./scheduler/
func TestMeasureBurst(t *testing.T) {
	if os.Getenv("SLOTD_MEASURE") == "" {
		t.Skip("set SLOTD_MEASURE=1 to measure")
	}
	for _, n := range []int{100, 10000} {
		for _, backend := range []string{"redis", "zookeeper"} {
			t.Run(fmt.Sprintf("%s/%d", backend, n), func(t *testing.T) { measureBurst(t, backend, n) })
		}
	}
}

type burstRun struct {
	slot          time.Time
	started, ends time.Time
}

func measureBurst(t *testing.T, backend string, n int) {
	// The default lease: the engine gives a batch of claims a third of it.
	const period, lease = 30 * time.Second, 15 * time.Second
	var stores []lock.Store
	if backend == "redis" {
		stores = redisStores(t, 3)
	} else {
		// an ensemble of its own: nothing else's nodes in the measure
		stores = zkStoresOn(t, zktest.Start(t, 3).Servers(), "/slotd", 3, lease)
	}
	var mu sync.Mutex
	runs := map[time.Time][]burstRun{}
	job := tasks.TaskFunc(func(ctx context.Context) error {
		r, _ := tasks.RunFrom(ctx)
		started := time.Now()
		mu.Lock()
		runs[r.SlotTime] = append(runs[r.SlotTime], burstRun{slot: r.SlotTime, started: started, ends: time.Now()})
		mu.Unlock()
		return nil
	})
	ts := make([]scheduler.Task, n)
	for i := range n {
		ts[i] = testTask(t, fmt.Sprintf("t%05d", i), "*/30 * * * * *", job, func(t *scheduler.Task) { t.Lease = lease })
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: measureLogLevel()}))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i, s := range stores {
		sched := scheduler.New(ts, s, scheduler.WithLogger(log), scheduler.WithReplica(fmt.Sprintf("r%d", i)),
			scheduler.WithShutdownGrace(time.Second))
		wg.Add(1)
		go func() { defer wg.Done(); _ = sched.Run(ctx) }()
	}
	defer func() { cancel(); wg.Wait() }()
	deadline := time.Now().Add(3*period + 10*time.Second)
	var burst []burstRun
	for time.Now().Before(deadline) {
		mu.Lock()
		slots := make([]time.Time, 0, len(runs))
		for at := range runs {
			slots = append(slots, at)
		}
		slices.SortFunc(slots, func(a, b time.Time) int { return a.Compare(b) })
		if len(slots) >= 2 && len(runs[slots[1]]) >= n {
			burst = append([]burstRun(nil), runs[slots[1]]...)
		}
		mu.Unlock()
		if burst != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if burst == nil {
		mu.Lock()
		counts := map[string]int{}
		for at, rs := range runs {
			counts[at.Format("15:04:05")] = len(rs)
		}
		mu.Unlock()
		t.Fatalf("no complete second burst of %d within %v; runs per slot: %v", n, 3*period, counts)
	}
	if len(burst) != n {
		t.Fatalf("%d runs of one slot, want %d (each task once)", len(burst), n)
	}
	delays := make([]time.Duration, len(burst))
	var last time.Time
	for i, r := range burst {
		delays[i] = r.started.Sub(r.slot)
		if r.ends.After(last) {
			last = r.ends
		}
	}
	slices.Sort(delays)
	pct := func(p float64) time.Duration { return delays[int(p*float64(len(delays)-1))].Round(time.Millisecond) }
	took := last.Sub(burst[0].slot)
	t.Logf("MEASURE %-9s tasks=%-5d start delay p50=%v p99=%v max=%v; all %d ran within %v (%.0f slots/s)",
		backend, n, pct(0.5), pct(0.99), pct(1), n, took.Round(time.Millisecond), float64(n)/took.Seconds())
}

// measureLogLevel is SLOTD_MEASURE_LOG's level (error by default).
func measureLogLevel() slog.Level {
	var l slog.Level
	if l.UnmarshalText([]byte(os.Getenv("SLOTD_MEASURE_LOG"))) != nil {
		return slog.LevelError
	}
	return l
}
