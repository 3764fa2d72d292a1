package lock_test

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
// fail too), the loss is reported before the lease could run out, and
// the completion goes on: it compares ownership, so it may still land if
// the store holds the slot for this attempt. On Redis the key expires
// with the lease: the next try finds it gone, and Complete stops with
// ErrLeaseLost and ErrNotHeld, long before ctx ends; the slot is not done.
func TestCompleteAfterLeaseLostStopsWhenNotHeld(t *testing.T) {
	r, _ := redisStore(t)
	f := &faulty{Store: r}
	p := lock.Policy{Lease: 300 * time.Millisecond, DoneTTL: time.Minute, MaxAttempts: 3}
	slot := openSlot(t, r)
	c := claimWon(t, f, slot, "a", p)
	var losses atomic.Int64
	lost := make(chan time.Duration, 1)
	l := lock.Hold(context.Background(), f, slot, "a", c, p.Lease, lock.LeaseHooks{
		Lost: func(error) { losses.Add(1); lost <- time.Since(c.Sent) },
	})
	f.failCompletes.Store(-1)
	f.failRenew.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- l.Complete(ctx, p.DoneTTL) }()
	var lostAt time.Duration
	select {
	case lostAt = <-lost:
	case err := <-done:
		t.Fatalf("Complete = %v before the lease was lost", err)
	}
	if lostAt >= p.Lease {
		t.Errorf("lease reported lost %v after the claim, not before the %v lease could run out", lostAt, p.Lease)
	}
	// Wait for the key to expire in Redis, then let the completions through.
	for {
		if st, err := lock.ReadState(ctx, r, slot); err != nil || st.Status == "free" {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("Complete = %v while its key still existed", err)
		case <-time.After(p.Lease / 10):
		}
	}
	tries := f.completes.Load()
	f.failCompletes.Store(0)
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		t.Fatal("Complete still trying 20s on")
	}
	if !errors.Is(err, lock.ErrLeaseLost) || !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Complete = %v, want ErrLeaseLost and ErrNotHeld", err)
	}
	if tries < 2 {
		t.Errorf("%d completions tried before the key expired, want retries past the loss", tries)
	}
	if losses.Load() != 1 || !l.Lost() {
		t.Errorf("Lost hook called %d times, Lost() %v; want 1, true", losses.Load(), l.Lost())
	}
	if st, _ := lock.ReadState(context.Background(), r, slot); st.Status == "done" {
		t.Fatal("slot marked done by a holder whose key had expired")
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
