package redislock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slotd/slotd/lock"
)

// A completion that fails for several leases' worth of time (a store out
// of memory, timeouts) is retried while the watchdog keeps renewing: the
// slot ends done by attempt 1, the lease is never reported lost, and a
// peer's claim finds the slot done instead of starting attempt 2.
func TestCompleteRetriedWhileLeaseRenews(t *testing.T) {
	r, _ := redisStore(t)
	f := &faulty{Store: r}
	p := lock.Policy{Lease: 300 * time.Millisecond, DoneTTL: time.Minute, MaxAttempts: 3}
	slot := openSlot(t, r)
	c := claimWon(t, f, slot, "a", p)
	var renewals, losses atomic.Int64
	l := lock.Hold(context.Background(), f, slot, "a", c, p.Lease, lock.LeaseHooks{
		Renewed: func() { renewals.Add(1) },
		Lost:    func(error) { losses.Add(1) },
	})
	// Fifteen failures take about 1.2s with the lease's backoff (10ms
	// doubling to 100ms): four leases.
	const fails = 15
	f.failCompletes.Store(fails)
	start := time.Now()
	before := renewals.Load()
	if err := l.Complete(context.Background(), p.DoneTTL); err != nil {
		t.Fatalf("Complete after %d failed tries: %v", f.completes.Load(), err)
	}
	took := time.Since(start)
	renewed := renewals.Load() - before
	t.Logf("completed after %d tries in %v (lease %v), %d renewals meanwhile", f.completes.Load(), took, p.Lease, renewed)
	if took < 2*p.Lease {
		t.Fatalf("the failures lasted %v, under two leases: the test shows nothing", took)
	}
	if n := f.completes.Load(); n != fails+1 {
		t.Errorf("%d completions tried, want %d", n, fails+1)
	}
	if min := int64(took / (p.Lease / 3) / 2); renewed < min {
		t.Errorf("%d renewals while completing for %v, want at least %d: the watchdog stopped", renewed, took, min)
	}
	if losses.Load() != 0 || l.Lost() {
		t.Errorf("lease reported lost %d times (Lost %v) although it was renewed", losses.Load(), l.Lost())
	}
	st, err := lock.ReadState(context.Background(), r, slot)
	if err != nil || st.Status != "done" || st.Holder != "a" || st.Attempt != 1 {
		t.Fatalf("state = %+v, %v; want done by a, attempt 1", st, err)
	}
	got, err := r.Claim(context.Background(), slot, "b", p)
	if err != nil || got.Result != lock.Done {
		t.Fatalf("peer claim after the completion = %+v, %v; want done (no attempt 2)", got, err)
	}
	// No renewal after the completion finds the done marker and reports a
	// loss: the watchdog is stopped.
	n := f.renews.Load()
	time.Sleep(p.Lease)
	if m := f.renews.Load(); m != n || losses.Load() != 0 {
		t.Errorf("after Complete: %d more renewals, %d losses; want none", m-n, losses.Load())
	}
}

// When the lease is truly lost while the completion is retried (renewals
// fail too), Complete gives up with ErrLeaseLost before the lease could
// have run out, and the slot is not marked done.
func TestCompleteGivesUpWhenLeaseLost(t *testing.T) {
	r, _ := redisStore(t)
	f := &faulty{Store: r}
	p := lock.Policy{Lease: 300 * time.Millisecond, DoneTTL: time.Minute, MaxAttempts: 3}
	slot := openSlot(t, r)
	c := claimWon(t, f, slot, "a", p)
	var losses atomic.Int64
	l := lock.Hold(context.Background(), f, slot, "a", c, p.Lease, lock.LeaseHooks{
		Lost: func(error) { losses.Add(1) },
	})
	f.failCompletes.Store(-1)
	f.failRenew.Store(true)
	start := time.Now()
	err := l.Complete(context.Background(), p.DoneTTL)
	took := time.Since(start)
	if !errors.Is(err, lock.ErrLeaseLost) || !errors.Is(err, errInjected) {
		t.Fatalf("Complete = %v, want ErrLeaseLost naming the last failure", err)
	}
	if took >= p.Lease {
		t.Errorf("gave up after %v, not before the %v lease could run out", took, p.Lease)
	}
	if losses.Load() != 1 || !l.Lost() {
		t.Errorf("Lost hook called %d times, Lost() %v; want 1, true", losses.Load(), l.Lost())
	}
	if st, _ := lock.ReadState(context.Background(), r, slot); st.Status == "done" {
		t.Fatal("slot marked done by a holder that lost its lease")
	}
}

// A completion still failing when ctx ends gives up with the last error,
// and stops the renewals: the lease then runs out on its own.
func TestCompleteStopsWithContext(t *testing.T) {
	r, _ := redisStore(t)
	f := &faulty{Store: r}
	p := lock.Policy{Lease: 300 * time.Millisecond, DoneTTL: time.Minute, MaxAttempts: 3}
	slot := openSlot(t, r)
	c := claimWon(t, f, slot, "a", p)
	l := lock.Hold(context.Background(), f, slot, "a", c, p.Lease, lock.LeaseHooks{})
	f.failCompletes.Store(-1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*p.Lease)
	defer cancel()
	if err := l.Complete(ctx, p.DoneTTL); !errors.Is(err, errInjected) {
		t.Fatalf("Complete = %v, want the injected error", err)
	}
	n := f.renews.Load()
	time.Sleep(p.Lease)
	if m := f.renews.Load(); m != n {
		t.Errorf("%d renewals after Complete gave up, want none", m-n)
	}
}
