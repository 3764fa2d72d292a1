package scheduler_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/testlane"
	"github.com/slotd/slotd/lock/memlock"
	"github.com/slotd/slotd/scheduler"
	"github.com/slotd/slotd/tasks"
)

// gate blocks the first attempt that enters it until it is opened.
type gate struct {
	once    sync.Once
	entered chan time.Time
	open    chan struct{}
}

func newGate() *gate { return &gate{entered: make(chan time.Time, 1), open: make(chan struct{})} }

func (g *gate) job(ctx context.Context, _ tasks.Run) error {
	first := false
	g.once.Do(func() { first = true })
	if !first {
		return nil
	}
	g.entered <- time.Now()
	select {
	case <-g.open:
	case <-ctx.Done():
	}
	return nil
}

// A replica at max_running claims nothing: while its one attempt runs,
// its peers take every slot of a shared task, the ones it was the
// preferred claimant of included; the slots of a task only it has are
// missed, for capacity; once its attempt ends it claims again.
func TestMaxRunningHandsSlotsToPeers(t *testing.T) {
	testlane.Parallel(t, lightLane)
	stores := redisStores(t, 3)
	l := newLedger()
	g := newGate()
	hold := testTask(t, "hold", "@every 1s", l.job(g.job), nil)
	tick := testTask(t, "tick", "@every 1s", l.job(ok), nil)
	a := startReplica(t, "r0", stores[0], time.Second, []scheduler.Task{hold, tick}, scheduler.WithMaxRunning(1))
	var blocked time.Time
	select {
	case blocked = <-g.entered:
	case <-time.After(15 * time.Second):
		t.Fatal("the hold task never started on r0")
	}
	startReplica(t, "r1", stores[1], time.Second, []scheduler.Task{tick})
	startReplica(t, "r2", stores[2], time.Second, []scheduler.Task{tick})
	from := blocked.Truncate(time.Second).Add(2 * time.Second)
	to := from.Add(6 * time.Second)
	// Slots that fired before the peers were up were r0's alone: they
	// count as missed for capacity. From the second slot after from on,
	// none may.
	l.await(t, "a tick slot after the peers started", 30*time.Second, func(rs []record) bool {
		for _, r := range rs {
			if r.run.Task == "tick" && r.done && r.run.SlotTime.After(from) {
				return true
			}
		}
		return false
	})
	missedBefore := value(t, a.sched, "slotd_slots_missed_capacity_total", "tick", "")
	rs := l.await(t, "six tick slots run by the peers", 30*time.Second, func(rs []record) bool {
		n := 0
		for _, r := range rs {
			if r.run.Task == "tick" && r.done && !r.run.SlotTime.Before(from) && r.run.SlotTime.Before(to) {
				n++
			}
		}
		return n >= 6
	})
	for _, r := range rs {
		if r.run.Task == "tick" && !r.run.SlotTime.Before(from) && r.run.SlotTime.Before(to) && r.run.Replica == "r0" {
			t.Errorf("r0 ran tick slot %s while at max_running", r.run.Slot)
		}
		if r.run.Task == "hold" && r.run.SlotTime.After(blocked) {
			t.Errorf("r0 ran hold slot %s while at max_running", r.run.Slot)
		}
	}
	perSlot := map[string]int{}
	for _, r := range rs {
		if r.run.Task == "tick" && !r.run.SlotTime.Before(from) && r.run.SlotTime.Before(to) {
			perSlot[r.run.Slot]++
		}
	}
	var worst time.Duration
	for _, r := range rs {
		if r.run.Task == "tick" && !r.run.SlotTime.Before(from) && r.run.SlotTime.Before(to) {
			worst = max(worst, r.started.Sub(r.run.SlotTime))
		}
	}
	t.Logf("tick slots while r0 was full: worst start delay %v", worst)
	for slot, n := range perSlot {
		if n != 1 {
			t.Errorf("tick slot %s ran %d times", slot, n)
		}
	}
	st := a.sched.Stats()
	if st.Capacity.Max.Load() != 1 || st.Capacity.Running.Load() != 1 {
		t.Errorf("r0 capacity: max %d, running %d; want 1, 1", st.Capacity.Max.Load(), st.Capacity.Running.Load())
	}
	if n := value(t, a.sched, "slotd_slots_missed_capacity_total", "hold", ""); n < 1 {
		t.Errorf("r0 missed %v hold slots for capacity, want some: only r0 has the task and it was full", n)
	}
	if n := value(t, a.sched, "slotd_slots_missed_capacity_total", "tick", ""); n != missedBefore {
		t.Errorf("r0 counted %v tick slots missed for capacity while its peers ran them", n-missedBefore)
	}

	// Room again: r0 claims again, hold's slots first among others.
	close(g.open)
	opened := time.Now()
	l.await(t, "r0 running slots again", 20*time.Second, func(rs []record) bool {
		for _, r := range rs {
			if r.run.Replica == "r0" && r.done && r.started.After(opened) {
				return true
			}
		}
		return false
	})
}

// On the embedded store, one replica at max_running misses the slots it
// cannot start, for capacity, and runs them again once its attempt ends.
func TestMaxRunningOnTheEmbeddedStore(t *testing.T) {
	testlane.Parallel(t, lightLane)
	l := newLedger()
	g := newGate()
	hold := testTask(t, "hold", "@every 1s", l.job(g.job), nil)
	tick := testTask(t, "tick", "@every 1s", l.job(ok), nil)
	solo := startReplica(t, "solo", memlock.New(nil), time.Second, []scheduler.Task{hold, tick}, scheduler.WithMaxRunning(1))
	var blocked time.Time
	select {
	case blocked = <-g.entered:
	case <-time.After(15 * time.Second):
		t.Fatal("the hold task never started")
	}
	deadline := time.After(20 * time.Second)
	for value(t, solo.sched, "slotd_slots_missed_capacity_total", "tick", "") < 2 {
		select {
		case <-deadline:
			t.Fatal("no tick slot missed for capacity")
		case <-time.After(100 * time.Millisecond):
		}
	}
	if w := solo.sched.Stats().Capacity.Waiting.Load(); w < 1 || w > 4 {
		t.Errorf("slots waiting for capacity: %d, want the current slots of both tasks (1..4)", w)
	}
	for _, r := range l.snapshot() {
		if r.started.After(blocked.Add(time.Second)) {
			t.Errorf("slot %s of %s started while at max_running", r.run.Slot, r.run.Task)
		}
	}
	close(g.open)
	opened := time.Now()
	l.await(t, "ticks again", 20*time.Second, func(rs []record) bool {
		for _, r := range rs {
			if r.run.Task == "tick" && r.done && r.started.After(opened) {
				return true
			}
		}
		return false
	})
}
