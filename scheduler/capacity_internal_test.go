package scheduler

import (
	"testing"
	"time"

	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/memlock"
)

// A replica at max_running parks a run about to claim as capped; a peer's
// claim makes it wait as for a held slot, a completion settles it, and
// room (an attempt's end) lets the run capped longest claim.
func TestCappedTransitions(t *testing.T) {
	if capped.String() != "capped" || ended.String() != "ended" {
		t.Fatalf("state names: %v, %v", capped, ended)
	}
	l := testLoop(t, memlock.New(time.Now))
	l.s.maxRunning = 1
	l.attemptStarted() // the one attempt the cap allows
	task := &l.s.Tasks()[0]
	slot := time.Now().Truncate(time.Hour)
	mk := func() *run {
		r := l.newRun(task, slot)
		l.advance(r, false)
		if r.state != capped || len(l.claims) != 0 {
			t.Fatalf("at capacity: state %v, %d claims; want capped, none", r.state, len(l.claims))
		}
		return r
	}
	taken, done, first, second := mk(), mk(), mk(), mk()
	if w := l.s.stats.Capacity.Waiting.Load(); w != 4 {
		t.Errorf("waiting gauge %d, want 4", w)
	}

	l.onNotice(taken, lock.Taken)
	if taken.state != waiting || taken.last != lock.Held {
		t.Errorf("taken by a peer: state %v, last %v; want waiting, held", taken.state, taken.last)
	}
	l.onNotice(done, lock.Completed)
	if done.state != settled {
		t.Errorf("completed: state %v, want settled", done.state)
	}
	l.onNotice(first, lock.Released)
	if first.state != capped {
		t.Errorf("released while full: state %v, want still capped", first.state)
	}

	l.admit()
	if first.state != capped || len(l.claims) != 0 {
		t.Fatalf("admit at capacity: state %v, %d claims", first.state, len(l.claims))
	}
	l.attemptEnded()
	l.admit()
	if first.state != claiming || second.state != capped || len(l.claims) != 1 || l.claims[0] != first {
		t.Errorf("room for one: first %v, second %v, %d claims; want the first capped claiming, the second still capped",
			first.state, second.state, len(l.claims))
	}
	if w := l.s.stats.Capacity.Waiting.Load(); w != 1 {
		t.Errorf("waiting gauge %d, want 1", w)
	}
	if got := l.s.stats.Capacity.Running.Load(); got != 0 {
		t.Errorf("running gauge %d, want 0", got)
	}
}

// A capped run whose window closes is missed for capacity, once the lag
// for a notice on its way has passed without one and the store has the
// slot neither done nor running; in the lag it claims nothing, even with
// room.
func TestCappedRunMissedForCapacity(t *testing.T) {
	l := testLoop(t, memlock.New(time.Now))
	l.s.maxRunning = 1
	l.attemptStarted()
	task := &l.s.Tasks()[0]
	r := l.newRun(task, time.Now().Truncate(time.Hour))
	l.advance(r, false)
	if r.state != capped {
		t.Fatalf("state %v, want capped", r.state)
	}
	r.slot.Deadline = time.Now().Add(-time.Millisecond) // the window has closed
	l.onWake(r)
	st := l.s.stats.Task(task.Name)
	if r.state != capped || !r.lagged || st.Missed.Load() != 0 {
		t.Fatalf("at the deadline: state %v, lagged %v, missed %d; want capped, lagged, 0", r.state, r.lagged, st.Missed.Load())
	}
	l.attemptEnded()
	l.admit()
	if r.state != capped || len(l.claims) != 0 {
		t.Fatalf("admitted in the lag: state %v, %d claims; want capped, none", r.state, len(l.claims))
	}
	l.onWake(r) // the lag is over, no notice came: the store is asked
	if r.state != capped || st.Missed.Load() != 0 {
		t.Fatalf("at the lag's end: state %v, missed %d; want capped, 0 until the store answers", r.state, st.Missed.Load())
	}
	l.sendConfirms()
	handleUntil(t, l, "the read of the slot's state", func() bool { return r.state == ended })
	if r.state != ended || st.Missed.Load() != 1 || st.MissedCapacity.Load() != 1 {
		t.Errorf("state %v, missed %d, for capacity %d; want ended, 1, 1", r.state, st.Missed.Load(), st.MissedCapacity.Load())
	}
	if w := l.s.stats.Capacity.Waiting.Load(); w != 0 {
		t.Errorf("waiting gauge %d, want 0", w)
	}
}

// A peer's claim heard in the lag after the deadline (its Taken notice
// was on its way) is not a miss: the peer reports the slot.
func TestCappedRunTakenInTheLagIsNotMissed(t *testing.T) {
	l := testLoop(t, memlock.New(time.Now))
	l.s.maxRunning = 1
	l.attemptStarted()
	task := &l.s.Tasks()[0]
	r := l.newRun(task, time.Now().Truncate(time.Hour))
	l.advance(r, false)
	r.slot.Deadline = time.Now().Add(-time.Millisecond)
	l.onWake(r)
	l.onNotice(r, lock.Taken)
	l.wakeDue()
	st := l.s.stats.Task(task.Name)
	if r.state != ended || st.Missed.Load() != 0 {
		t.Errorf("taken in the lag: state %v, missed %d; want ended, 0", r.state, st.Missed.Load())
	}
	if w := l.s.stats.Capacity.Waiting.Load(); w != 0 {
		t.Errorf("waiting gauge %d, want 0", w)
	}
}

// A run capped again after a peer's claim keeps its one place in the list.
func TestCappedAgainKeepsItsPlace(t *testing.T) {
	l := testLoop(t, memlock.New(time.Now))
	l.s.maxRunning = 1
	l.attemptStarted()
	r := l.newRun(&l.s.Tasks()[0], time.Now().Truncate(time.Hour))
	l.advance(r, false)
	l.onNotice(r, lock.Taken) // waiting for the holder's lease
	l.unschedule(r)
	l.advance(r, false) // its wake: still full
	if r.state != capped || len(l.capped) != 1 {
		t.Errorf("state %v, %d entries in the capped list; want capped, 1", r.state, len(l.capped))
	}
}
