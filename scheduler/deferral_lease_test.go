package scheduler

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/memlock"
)

// A lease surely outlasts a slot's window when, claimed at the earliest
// (slot time less the tolerance), nine tenths of it reach the deadline.
func TestLeaseOutlasts(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		lease, tolerance, window time.Duration
		want                     bool
	}{
		{15 * time.Second, 0, time.Second, true},                // a per-second task at the default lease
		{15 * time.Second, 0, time.Hour, false},                 // an hourly one: its TTL is read
		{10 * time.Second, 0, 9 * time.Second, true},            // exactly nine tenths
		{10 * time.Second, 0, 9*time.Second + 1, false},         // a nanosecond short
		{10 * time.Second, time.Second, 9 * time.Second, false}, // claimable a second early
		{10 * time.Second, time.Second, 8 * time.Second, true},
	} {
		task := &Task{Policy: lock.Policy{Lease: c.lease, Tolerance: c.tolerance}}
		slot := lock.Slot{Task: "t", ID: "1", Time: at, Deadline: at.Add(c.window)}
		if got := leaseOutlasts(task, slot); got != c.want {
			t.Errorf("lease %v, tolerance %v, window %v: outlasts %v, want %v", c.lease, c.tolerance, c.window, got, c.want)
		}
	}
}

// askedPeeks is a memory store whose Peek records the TTLs asked for, and
// reads 0 for the others, as Redis does.
type askedPeeks struct {
	*memlock.Store
	mu    sync.Mutex
	asked [][]bool
}

func (p *askedPeeks) Peek(ctx context.Context, slots []lock.Slot, ttl []bool) ([]lock.State, error) {
	p.mu.Lock()
	p.asked = append(p.asked, ttl)
	p.mu.Unlock()
	sts, err := p.Store.Peek(ctx, slots, ttl)
	for i := range sts {
		if !ttl[i] {
			sts[i].TTL = 0
		}
	}
	return sts, err
}

// A deferral asks for the TTL of only the slots whose lease may end within
// their window: a held one whose lease outlasts it stays listed, unread,
// until its deadline (as when its TTL said so), and one whose lease may
// end sooner is read again when it does.
func TestDeferralReadsOnlyTheLeasesThatMayEndInTheWindow(t *testing.T) {
	store := &askedPeeks{Store: memlock.New(time.Now)}
	l, ts := batchLoop(t, store, 2, nil)
	l.tally = tallies{}         // the read itself, as on a store that keeps no tallies
	ts[0].Lease = 3 * time.Hour // past the slot's deadline (2 h from the hour)
	at := time.Now().Truncate(time.Hour)
	for _, task := range ts {
		l.onFire(task, at)
		c, err := store.Claim(context.Background(), task.Slot(at), "peer#1", task.Policy)
		if err != nil || c.Result != lock.Won {
			t.Fatalf("peer's claim of %s: %+v, %v", task.Name, c, err)
		}
	}
	l.closeFiring()
	d := checkNow(t, l)
	handleUntil(t, l, "the read's answer", func() bool { return readDone(d) })
	if len(store.asked) != 1 || len(store.asked[0]) != 2 || store.asked[0][0] || !store.asked[0][1] {
		t.Fatalf("TTLs asked %v; want one read, of d1's only", store.asked)
	}
	if len(l.claims) != 0 || len(l.checks) != 2 || len(l.byName) != 2 {
		t.Fatalf("after the read: %d claims, %d deferrals, %d listed; want none, 2 (settled, recheck), 2", len(l.claims), len(l.checks), len(l.byName))
	}
	for _, name := range []string{"d0", "d1"} {
		ref := l.byName[slotName{name, ts[0].Slot(at).ID}]
		if ref.d == nil || ref.d.settled != (name == "d0") {
			t.Errorf("%s: listed %+v; want settled only for the lease that outlasts the window", name, ref.d)
		}
	}
}
