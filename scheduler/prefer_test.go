package scheduler

import (
	"fmt"
	"testing"
	"time"

	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/memlock"
)

// Every replica that sees the same live set picks the same one preferred
// claimant per slot, and the shares are even; a replica missing from its
// own view defers every slot, and without a live set every replica claims.
func TestPreferredClaimantIsOnePerSlot(t *testing.T) {
	live := []string{"r1", "r2", "r3"}
	reps := make([]*Scheduler, len(live))
	for i, id := range live {
		reps[i] = New(nil, memlock.New(time.Now), WithReplica(id))
		reps[i].setLive([]string{"r3", "r1", "r2"}) // any order
	}
	const n = 3000
	share := map[string]int{}
	for i := range n {
		slot := lock.Slot{Task: fmt.Sprintf("t%04d", i%500), ID: fmt.Sprintf("2026112520%02d", i/500)}
		chosen := 0
		for _, s := range reps {
			if s.preferred(slot) {
				chosen++
				share[s.replica]++
			}
		}
		if chosen != 1 {
			t.Fatalf("slot %v: %d preferred claimants, want 1", slot, chosen)
		}
	}
	for _, id := range live {
		if got := share[id]; got < n/4 || got > n*5/12 {
			t.Errorf("replica %s preferred for %d of %d slots, want about a third: %v", id, got, n, share)
		}
	}

	slot := lock.Slot{Task: "t", ID: "20261125"}
	outsider := New(nil, memlock.New(time.Now), WithReplica("r4"))
	outsider.setLive(live)
	if outsider.preferred(slot) {
		t.Error("a replica missing from the live set is preferred")
	}
	alone := New(nil, memlock.New(time.Now), WithReplica("r4"))
	if !alone.preferred(slot) {
		t.Error("without a live set a replica defers")
	}
	alone.setLive(nil)
	if !alone.preferred(slot) {
		t.Error("with a nil live set (a store without Taken notices) a replica defers")
	}
}

// One replica leaving the live set moves only its own slots: every slot
// another replica was preferred for stays with it.
func TestPreferredClaimantMovesOnlyTheLeaversSlots(t *testing.T) {
	before, after := []string{"a", "b", "c", "d"}, []string{"a", "b", "d"}
	for _, id := range after {
		s := New(nil, memlock.New(time.Now), WithReplica(id))
		for i := range 1000 {
			slot := lock.Slot{Task: fmt.Sprintf("t%d", i), ID: "20261125"}
			s.setLive(before)
			was := s.preferred(slot)
			s.setLive(after)
			if was && !s.preferred(slot) {
				t.Fatalf("replica %s lost slot %v when c left", id, slot)
			}
		}
	}
}

// deferredRun makes a run of the "report" task's slot of the current hour
// on a replica that is not its preferred claimant, as onFire does.
func deferredRun(t *testing.T, l *loop) *run {
	t.Helper()
	l.s.setLive([]string{"peer"}) // this replica ("report"'s runner) is not in it
	at := time.Now().Truncate(time.Hour)
	l.onFire(&l.s.Tasks()[0], at)
	if len(l.wakes) != 1 {
		t.Fatalf("after the fire: %d runs waiting, want 1", len(l.wakes))
	}
	r := l.wakes[0]
	if r.state != deferring || len(l.claims) != 0 {
		t.Fatalf("after the fire: state %v, %d claims queued; want deferring, none", r.state, len(l.claims))
	}
	if w := r.wakeAt.Sub(time.Now()); w > preferWait {
		t.Fatalf("deferring run wakes in %v, want within preferWait %v", w, preferWait)
	}
	return r
}

// A deferring run told the slot was taken waits as if its claim had found
// the slot held, for most of a lease, without claiming.
func TestDeferringRunToldTakenWaits(t *testing.T) {
	l := testLoop(t, memlock.New(time.Now))
	r := deferredRun(t, l)
	l.onNotice(r, lock.Taken)
	if r.state != waiting || len(l.claims) != 0 || r.last != lock.Held {
		t.Fatalf("after Taken: state %v, last %v, %d claims queued; want waiting, held, none", r.state, r.last, len(l.claims))
	}
	if w := r.wakeAt.Sub(time.Now()); w < takenWait(r.t.Lease)-time.Second || w > takenWait(r.t.Lease) {
		t.Errorf("after Taken: wakes in %v, want about %v", w, takenWait(r.t.Lease))
	}
	l.onNotice(r, lock.Taken) // a notice for the next claim: nothing changes
	if r.state != waiting || len(l.claims) != 0 {
		t.Errorf("a second Taken: state %v, %d claims queued", r.state, len(l.claims))
	}
	l.onNotice(r, lock.Completed)
	if r.state != settled {
		t.Errorf("after the completion: state %v, want settled", r.state)
	}
}

// A deferring run settles on a completion and claims at once on a release.
func TestDeferringRunActsOnCompletionAndRelease(t *testing.T) {
	l := testLoop(t, memlock.New(time.Now))
	r := deferredRun(t, l)
	l.onNotice(r, lock.Completed)
	if r.state != settled || len(l.claims) != 0 {
		t.Errorf("after a completion: state %v, %d claims queued; want settled, none", r.state, len(l.claims))
	}
	r2 := l.newRun(&l.s.Tasks()[0], time.Now().Truncate(time.Hour))
	r2.state, r2.deferUntil = deferring, time.Now().Add(time.Second)
	l.schedule(r2, preferWait)
	l.onNotice(r2, lock.Released)
	if r2.state != claiming || len(l.claims) != 1 {
		t.Errorf("after a release: state %v, %d claims queued; want claiming, 1", r2.state, len(l.claims))
	}
}

// A deferring run whose wait is over claims; while this replica's own
// claims are pending it waits until they are answered, and then until
// its peers' Taken notices have stopped coming, within its limit.
func TestDeferringRunClaimsWhenNotTold(t *testing.T) {
	l := testLoop(t, memlock.New(time.Now))
	r := deferredRun(t, l)

	l.pending = 5
	l.unschedule(r)
	l.onWake(r)
	if d := r.wakeAt.Sub(r.deferUntil).Abs(); r.state != deferring || len(l.deferred) != 1 || d > 10*time.Millisecond {
		t.Fatalf("woken with claims pending: state %v, %d deferred, wakes %v from its limit; want deferring, 1, at it",
			r.state, len(l.deferred), d)
	}
	l.releaseDeferred()
	if len(l.deferred) != 1 {
		t.Fatal("released while claims were pending")
	}
	l.pending = 0
	l.releaseDeferred()
	if w := r.wakeAt.Sub(time.Now()); len(l.deferred) != 0 || w > preferWait {
		t.Fatalf("once no claim is pending: %d deferred, wakes in %v; want 0, within %v", len(l.deferred), w, preferWait)
	}

	l.lastTaken = time.Now() // a peer's notice just came: its claims still go out
	l.unschedule(r)
	l.onWake(r)
	if w := r.wakeAt.Sub(time.Now()); r.state != deferring || w > quietFor {
		t.Fatalf("woken while notices come: state %v, wakes in %v; want deferring, within %v", r.state, w, quietFor)
	}
	l.lastTaken = time.Now().Add(-quietFor)
	l.unschedule(r)
	l.onWake(r)
	if r.state != claiming || len(l.claims) != 1 {
		t.Fatalf("woken when nothing came: state %v, %d claims queued; want claiming, 1", r.state, len(l.claims))
	}

	// At its limit a run claims whatever is pending.
	r2 := l.newRun(&l.s.Tasks()[0], time.Now().Truncate(time.Hour))
	r2.state, r2.deferUntil = deferring, time.Now()
	l.pending = 5
	l.onWake(r2)
	if r2.state != claiming {
		t.Errorf("woken at its limit with claims pending: state %v, want claiming", r2.state)
	}
}

// A run defers at most half of its slot's window, and at most
// preferWaitMax.
func TestDeferLimit(t *testing.T) {
	at := time.Date(2026, 11, 25, 20, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		window time.Duration
		want   time.Duration
	}{
		{time.Second, 500 * time.Millisecond},
		{time.Hour, preferWaitMax},
		{100 * time.Millisecond, 50 * time.Millisecond},
	} {
		if got := deferLimit(lock.Slot{Time: at, Deadline: at.Add(tc.window)}); got != tc.want {
			t.Errorf("window %v: limit %v, want %v", tc.window, got, tc.want)
		}
	}
}

// The runs held back while claims are pending do not pile up when claims
// are pending at every turn (sustained load): the list drops those that
// have claimed or been told meanwhile as it grows.
func TestHeldBackRunsDoNotPileUp(t *testing.T) {
	l := testLoop(t, memlock.New(time.Now))
	r := deferredRun(t, l)
	for range 10000 {
		l.holdBack(&run{state: ended, index: -1})
	}
	l.holdBack(r)
	if n := len(l.deferred); n > 2 {
		t.Errorf("%d runs held back after 10,000 that had ended, want at most 2 (the live one)", n)
	}
	if l.deferred[len(l.deferred)-1] != r {
		t.Error("the live run was not kept")
	}
}
