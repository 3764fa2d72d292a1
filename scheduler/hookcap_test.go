package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/stats"
	"github.com/slotd/slotd/internal/testlane"
	"github.com/slotd/slotd/scheduler"
	"github.com/slotd/slotd/tasks"
)

// gauge counts hooks running at once and remembers the most.
type gauge struct {
	mu       sync.Mutex
	now, top int
	ran      int
}

func (g *gauge) add(d int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.now += d
	g.top = max(g.top, g.now)
	if d > 0 {
		g.ran++
	}
}

func (g *gauge) read() (top, ran int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.top, g.ran
}

// Twenty tasks fail every second and each slot's hook hangs: the replica
// runs at most max_hooks hooks at once, and counts the others dropped
// (not run, their once marker left for a peer). Before the cap, the hooks
// piled up without bound (120 after 12 s).
func TestHooksCappedPerReplica(t *testing.T) {
	testlane.Parallel(t, lightLane)
	_, stores := notifyStores(t, 1)
	var g gauge
	release := make(chan struct{})
	hang := tasks.TaskFunc(func(ctx context.Context) error {
		g.add(1)
		defer g.add(-1)
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	h := &scheduler.Hook{Plugin: "test", Params: map[string]any{}, Timeout: time.Minute, Job: hang}
	l := newLedger()
	fail := l.job(func(context.Context, tasks.Run) error { return errors.New("boom") })
	var ts []scheduler.Task
	for i := range 20 {
		ts = append(ts, testTask(t, fmt.Sprintf("fails-%02d", i), "@every 1s", fail, func(d *scheduler.Task) {
			d.MaxAttempts, d.OnFailure = 1, h
		}))
	}
	const limit = 3
	r := startReplica(t, "r1", stores[0], time.Second, ts, scheduler.WithMaxHooks(limit))
	defer close(release)
	dropped := func() uint64 {
		return notified([]*replica{r})[stats.NotifyDropped]
	}
	await(t, "20 hooks dropped", 20*time.Second, func() bool { return dropped() >= 20 })
	top, ran := g.read()
	if top != limit || ran != limit {
		t.Fatalf("hooks at once: at most %d, %d started; want %d and %d (max_hooks)", top, ran, limit, limit)
	}
}
