package keepalive

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// The heap keeps its order and each lease's place through adds, removals
// and wakes brought forward: taken off in turn, the wakes come out sorted,
// and a removed lease is no longer on it. The wakes are an hour away: the
// timer never fires during the test.
func TestWheelOrder(t *testing.T) {
	var w wheel
	defer func() {
		if w.timer != nil {
			w.timer.Stop()
		}
	}()
	base := time.Now().Add(time.Hour)
	leases := make([]*Lease, 500)
	for i := range leases {
		leases[i] = &Lease{}
		w.add(leases[i], base.Add(time.Duration(rand.IntN(1000))*time.Millisecond))
	}
	removed := map[*Lease]bool{}
	for i := range 100 {
		k := leases[rand.IntN(len(leases))]
		if !removed[k] != w.remove(k) {
			t.Fatalf("remove %d: on the heap %v, removed before %v", i, k.pos != 0, removed[k])
		}
		removed[k] = true
	}
	for range 100 {
		k := leases[rand.IntN(len(leases))]
		if on := w.wake(k, base.Add(-time.Duration(rand.IntN(1000))*time.Millisecond)); on == removed[k] {
			t.Fatalf("wake: on the heap %v, removed %v", on, removed[k])
		}
	}
	if w.armed != w.heap[0].at {
		t.Errorf("timer set for %v, earliest wake %v", w.armed, w.heap[0].at)
	}
	var last time.Time
	for n := 0; len(w.heap) > 0; n++ {
		k := w.heap[0]
		if k.pos != 1 || k.at.Before(last) {
			t.Fatalf("entry %d: place %d, wake %v after %v", n, k.pos, k.at, last)
		}
		last = k.at
		if !w.remove(k) || k.pos != 0 || removed[k] {
			t.Fatalf("entry %d: not removed, or removed before", n)
		}
		removed[k] = true
	}
	if len(removed) != len(leases) {
		t.Fatalf("%d leases came off the heap, want %d", len(removed), len(leases))
	}
}

// Many leases share the one heap: each kept lease is an entry on it, and
// stopped, it is gone from it.
func TestLeasesShareOneHeap(t *testing.T) {
	size := func() int {
		watchdogs.mu.Lock()
		defer watchdogs.mu.Unlock()
		return len(watchdogs.heap)
	}
	before := size()
	leases := make([]Lease, 1000)
	for i := range leases {
		leases[i].Keep(context.Background(), time.Hour, 6*time.Minute, time.Now(), holder{func(context.Context) error { return nil }, nil, func(why error) error { t.Errorf("lost: %v", why); return why }})
	}
	if n := size(); n != before+len(leases) {
		t.Fatalf("%d entries on the heap with %d leases kept, want %d", n, len(leases), before+len(leases))
	}
	for i := range leases {
		if _, valid := leases[i].Stop(); !valid {
			t.Fatalf("lease %d invalid at stop", i)
		}
	}
	if n := size(); n != before {
		t.Fatalf("%d entries on the heap after every lease stopped, want %d", n, before)
	}
}

// The renewals of leases due on one instant are under way together, so a
// store's batching can join them: each renewal here waits until every
// lease's has begun, which one renewal at a time would never see.
func TestDueRenewalsLeaveTogether(t *testing.T) {
	const n = 50
	var mu sync.Mutex
	begun := 0
	all := make(chan struct{})
	renew := func(ctx context.Context) error {
		mu.Lock()
		if begun++; begun == n {
			close(all)
		}
		mu.Unlock()
		select {
		case <-all:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	renewed := make(chan struct{}, n)
	leases := make([]Lease, n)
	now := time.Now()
	for i := range leases {
		leases[i].Keep(context.Background(), 3*time.Second, 300*time.Millisecond, now, holder{func(ctx context.Context) error {
			mu.Lock()
			first := begun < n
			mu.Unlock()
			if !first {
				return nil // a later round
			}
			return renew(ctx)
		}, func() { renewed <- struct{}{} }, func(why error) error { t.Errorf("lost: %v", why); return why }})
	}
	defer func() {
		for i := range leases {
			leases[i].Stop()
		}
	}()
	for i := range n {
		select {
		case <-renewed:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d leases renewed within 10s", i, n)
		}
	}
}

// A lease whose renewals are never answered is lost, with ErrNoRenewal,
// and not before the validity its last confirmed send proved; the other
// leases on the heap keep renewing meanwhile.
func TestUnansweredLeaseLostAmongOthers(t *testing.T) {
	var quiet, busy Lease
	quiet.Keep(context.Background(), 300*time.Millisecond, 30*time.Millisecond, time.Now(), holder{func(ctx context.Context) error {
		<-ctx.Done() // no answer
		return ctx.Err()
	}, nil, func(why error) error { return errors.Join(ErrLeaseLost, why) }})
	renewed := make(chan struct{}, 100)
	busy.Keep(context.Background(), 300*time.Millisecond, 30*time.Millisecond, time.Now(), holder{func(context.Context) error { return nil }, func() {
		select {
		case renewed <- struct{}{}:
		default:
		}
	}, func(why error) error { t.Errorf("busy lease lost: %v", why); return why }})
	defer busy.Stop()
	select {
	case <-quiet.Context().Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a lease never renewed was not lost within 5s")
	}
	if now, until := time.Now(), quiet.ValidUntil(); now.Before(until) {
		t.Errorf("lost %v before its validity ran out", until.Sub(now))
	}
	if cause := context.Cause(quiet.Context()); !errors.Is(cause, ErrNoRenewal) || !errors.Is(cause, ErrLeaseLost) {
		t.Fatalf("cause %v, want ErrLeaseLost and ErrNoRenewal", cause)
	}
	if _, valid := quiet.Stop(); valid {
		t.Error("stop found the lost lease valid")
	}
	for range 3 {
		select {
		case <-renewed:
		case <-time.After(5 * time.Second):
			t.Fatal("the other lease stopped renewing")
		}
	}
}
