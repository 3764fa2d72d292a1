package scheduler_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/internal/testlane"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/memlock"
	"github.com/slotd/slotd/lock/redislock"
	"github.com/slotd/slotd/scheduler"
)

// storePaused reads task's pause state from the store; false if it
// cannot (a store restarting).
func storePaused(t *testing.T, s lock.Store, task string) bool {
	t.Helper()
	p, err := controls(t, s).Paused(context.Background(), []string{task}, false)
	if err != nil {
		t.Logf("pause state of %s: %v", task, err)
		return false
	}
	return p[0]
}

// paused reports whether the replica and the store both say task is
// paused (want) or both say it is not.
func pausedBoth(t *testing.T, r *replica, s lock.Store, task string, want bool) func() bool {
	return func() bool {
		return r.sched.Stats().Task(task).Paused.Load() == want && storePaused(t, s, task) == want
	}
}

// A change of the config's paused value acts fleet-wide, by reload and
// by restart, as an operator's pause or resume (Kubernetes' suspend); an
// unchanged value leaves an operator's later pause standing.
func TestConfigPausedChangeActs(t *testing.T) {
	testlane.Parallel(t, lightLane)
	stores := redisStores(t, 2)
	l := newLedger()
	paused := func(p bool, v int64) scheduler.Task {
		return testTask(t, "tick", "@every 1s", l.job(ok), func(d *scheduler.Task) {
			d.Paused, d.Params = p, map[string]any{"v": v}
		})
	}
	opt := scheduler.WithClockCheck(200 * time.Millisecond)
	r := startReplica(t, "r1", stores[0], time.Second, []scheduler.Task{paused(true, 1)}, opt)
	await(t, "the task paused as configured", 10*time.Second, pausedBoth(t, r, stores[0], "tick", true))

	reloadOnce(t, r.sched, paused(false, 1))
	await(t, "paused = false applied by a reload", 10*time.Second, pausedBoth(t, r, stores[0], "tick", false))
	l.await(t, "a run after the reload", 10*time.Second, func(rs []record) bool { return len(rs) > 0 })

	reloadOnce(t, r.sched, paused(true, 1))
	await(t, "paused = true applied by a reload", 10*time.Second, pausedBoth(t, r, stores[0], "tick", true))

	// A restart with the value changed applies it too.
	r.stop()
	r = startReplica(t, "r1", stores[1], time.Second, []scheduler.Task{paused(false, 1)}, opt)
	await(t, "paused = false applied by a restart", 10*time.Second, pausedBoth(t, r, stores[1], "tick", false))

	// An operator's pause stands across a reload and a restart whose
	// paused value did not change.
	if _, err := controls(t, stores[0]).SetPaused(context.Background(), "tick", lock.Pause); err != nil {
		t.Fatal(err)
	}
	await(t, "the operator's pause", 10*time.Second, pausedBoth(t, r, stores[0], "tick", true))
	reloadOnce(t, r.sched, paused(false, 2))
	r.stop()
	r = startReplica(t, "r1", stores[1], time.Second, []scheduler.Task{paused(false, 2)}, opt)
	n := skipped(r, "tick")
	await(t, "two slots skipped after the restart", 10*time.Second, func() bool { return skipped(r, "tick") >= n+2 })
	if !storePaused(t, stores[1], "tick") || !r.sched.Stats().Task("tick").Paused.Load() {
		t.Fatal("an unchanged paused = false undid the operator's pause")
	}
}

// pausedOnly is a store without operator controls (every store of slotd
// has them; a custom store may not): paused = true holds on each replica
// from its config.
type pausedOnly struct{ lock.Store }

// Without controls in the store, a reload that changes paused applies it.
func TestConfigPausedChangeActsWithoutControls(t *testing.T) {
	testlane.Parallel(t, lightLane)
	l := newLedger()
	task := func(p bool) scheduler.Task {
		return testTask(t, "tick", "@every 1s", l.job(ok), func(d *scheduler.Task) { d.Paused = p })
	}
	r := startReplica(t, "r1", pausedOnly{memlock.New(nil)}, time.Second, []scheduler.Task{task(true)},
		scheduler.WithClockCheck(200*time.Millisecond))
	await(t, "a skipped slot", 10*time.Second, func() bool { return skipped(r, "tick") >= 1 })
	reloadOnce(t, r.sched, task(false))
	if r.sched.Stats().Task("tick").Paused.Load() {
		t.Fatal("still paused after a reload with paused = false")
	}
	l.await(t, "a run after the reload", 10*time.Second, func(rs []record) bool { return len(rs) > 0 })
	reloadOnce(t, r.sched, task(true))
	if !r.sched.Stats().Task("tick").Paused.Load() {
		t.Fatal("not paused after a reload with paused = true")
	}
}

// A pause outlives a restart of the store without persistence: the live
// replicas that know the task paused write it back, and the task does not
// run.
func TestPauseWrittenBackAfterStoreLoss(t *testing.T) {
	testlane.Parallel(t, lightLane)
	srv := redistest.Start(t)
	store := redislock.New(srv.Client(), "slotd")
	t.Cleanup(func() { store.Close() })
	l := newLedger()
	task := testTask(t, "tick", "@every 1s", l.job(ok), nil)
	r := startReplica(t, "r1", store, time.Second, []scheduler.Task{task}, scheduler.WithClockCheck(200*time.Millisecond))
	if _, err := store.SetPaused(context.Background(), "tick", lock.Pause); err != nil {
		t.Fatal(err)
	}
	await(t, "the pause heard", 10*time.Second, pausedBoth(t, r, store, "tick", true))
	l.await(t, "runs under way to end", 10*time.Second, func(rs []record) bool {
		for _, r := range rs {
			if !r.done {
				return false
			}
		}
		return true
	})
	before := len(l.snapshot())
	srv.Restart() // empty: no persistence
	await(t, "the pause written back", 10*time.Second, func() bool { return storePaused(t, store, "tick") })
	n := skipped(r, "tick")
	await(t, "two more skipped slots", 10*time.Second, func() bool { return skipped(r, "tick") >= n+2 })
	if rs := l.snapshot(); len(rs) != before {
		t.Fatalf("%d runs after the store lost the pause:\n%s", len(rs)-before, dump(rs[before:]))
	}
}

// failingConfigure is the embedded store whose first Configure fails, as
// a store that does not answer at start.
type failingConfigure struct {
	*memlock.Store
	failed atomic.Bool
}

func (f *failingConfigure) Configure(ctx context.Context, tasks []string, paused []bool) ([]bool, error) {
	if !f.failed.Swap(true) {
		return nil, errors.New("store down")
	}
	return f.Store.Configure(ctx, tasks, paused)
}

// A configured pause the store could not take at start is applied at the
// next clock check, not only at the next reload.
func TestConfigPausedAppliedAfterStoreFailure(t *testing.T) {
	store := &failingConfigure{Store: memlock.New(nil)}
	task := testTask(t, "tick", "@every 1s", newLedger().job(ok), func(d *scheduler.Task) { d.Paused = true })
	startReplica(t, "r1", store, time.Second, []scheduler.Task{task}, scheduler.WithClockCheck(200*time.Millisecond))
	await(t, "the configured pause in the store", 10*time.Second, func() bool {
		p, err := store.Paused(context.Background(), []string{"tick"}, false)
		return err == nil && p[0]
	})
}

// epochFailures is a Redis store that counts the controls' epoch reads
// that failed.
type epochFailures struct {
	*redislock.Store
	failed atomic.Int64
}

func (s *epochFailures) Epoch(ctx context.Context) (int64, error) {
	e, err := s.Store.Epoch(ctx)
	if err != nil {
		s.failed.Add(1)
	}
	return e, err
}

// A clock check that finds the store down records no epoch: when the
// store comes back empty (its epoch 0 again, the pause gone), the next
// check reads the tasks and writes the pause back. Taking the epoch it
// could not read (0) for the one it found, it left the pause lost until
// the hourly sweep: TestPauseWrittenBackAfterStoreLoss failed so when a
// loaded machine made a check land while the server was restarting.
func TestPauseWrittenBackAfterAChecksReadFailed(t *testing.T) {
	testlane.Parallel(t, lightLane)
	srv := redistest.Start(t)
	store := &epochFailures{Store: redislock.New(srv.Client(), "slotd")}
	t.Cleanup(func() { store.Close() })
	task := testTask(t, "tick", "@every 1s", newLedger().job(ok), nil)
	r := startReplica(t, "r1", store, time.Second, []scheduler.Task{task}, scheduler.WithClockCheck(50*time.Millisecond))
	if _, err := store.SetPaused(context.Background(), "tick", lock.Pause); err != nil {
		t.Fatal(err)
	}
	await(t, "the pause heard", 10*time.Second, pausedBoth(t, r, store, "tick", true))
	srv.Stop()
	await(t, "two clock checks while the store is down", 10*time.Second, func() bool { return store.failed.Load() >= 2 })
	srv.Restart() // empty: no persistence
	await(t, "the pause written back", 10*time.Second, func() bool { return storePaused(t, store, "tick") })
}
