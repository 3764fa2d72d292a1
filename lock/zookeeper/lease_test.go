package zklock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/zktest"
	"github.com/slotd/slotd/lock"
	zklock "github.com/slotd/slotd/lock/zookeeper"
)

// renewFails wraps a real store and fails every renewal, as a holder
// whose renewals time out while its session lives on does.
type renewFails struct{ lock.Store }

var errRenewInjected = errors.New("injected: renewal timed out")

func (renewFails) Renew(context.Context, lock.Slot, lock.Owner, time.Duration) error {
	return errRenewInjected
}

// A holder that loses its lease while its session lives tells the store
// when it releases: its run node goes at once, and a peer on another
// session wins the slot without waiting for the lease to be judged run
// out. (Before, a lost lease's release returned without a word to the
// store, and the node held the slot for as long as the session lived.)
func TestLostLeaseReleaseDeletesRunNode(t *testing.T) {
	e := zktest.Start(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := dialWith(t, e, zklock.Options{})
	b := dialWith(t, e, zklock.Options{})
	p := lock.Policy{Lease: 2 * time.Second, DoneTTL: time.Hour, MaxAttempts: 3}
	slot := openSlot(ctx, t, a, "1")
	c, err := a.Claim(ctx, slot, "a", p)
	if err != nil || c.Result != lock.Won {
		t.Fatalf("claim = %+v, %v", c, err)
	}
	l := lock.Hold(ctx, renewFails{a}, slot, "a", c, p.Lease, lock.LeaseHooks{})
	select {
	case <-l.Context().Done():
	case <-ctx.Done():
		t.Fatal("lease not lost")
	}
	if !errors.Is(context.Cause(l.Context()), lock.ErrLeaseLost) {
		t.Fatalf("cause = %v, want ErrLeaseLost", context.Cause(l.Context()))
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("release of the lost lease: %v", err)
	}
	released := time.Since(c.Sent)
	if ok, _, err := a.Conn().Exists(a.RunPath(slot)); err != nil || ok {
		t.Fatalf("run node exists = %v (%v) after the lost lease's release, want gone", ok, err)
	}
	got, err := b.Claim(ctx, slot, "b", p)
	if err != nil || got.Result != lock.Won || got.Attempt != 2 {
		t.Fatalf("peer's claim %v after a's claim = %+v, %v; want won, attempt 2", time.Since(c.Sent), got, err)
	}
	t.Logf("lease lost and released %v after the claim (lease %v); the peer won at once", released, p.Lease)
}

// A claim in doubt (its reply lost) found again only after its lease
// has run out is still this replica's, if no peer took it over: no
// attempt ran under it, so it costs none. It is rewritten when found, so
// that peers judge its lease from then.
func TestClaimInDoubtFoundPastItsLease(t *testing.T) {
	e := zktest.Start(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var drop replyDropper
	a := dialWith(t, e, zklock.Options{Dialer: drop.dial})
	b := dialWith(t, e, zklock.Options{})
	p := shortLease
	slot := openSlot(ctx, t, a, "1")
	drop.armed.Store(true)
	if c, err := a.Claim(ctx, slot, "a", p); err == nil {
		t.Fatalf("claim whose reply was dropped = %+v, want an error", c)
	}
	// The lease runs by the leader's clock: let it run out.
	time.Sleep(p.Lease + p.Lease/2)
	c, err := a.Claim(ctx, slot, "a", p)
	if err != nil || c.Result != lock.Won || c.Attempt != 1 {
		t.Fatalf("claim after the lease of the claim in doubt = %+v, %v; want won, attempt 1", c, err)
	}
	if got, err := b.Claim(ctx, slot, "b", p); err != nil || got.Result != lock.Held || got.Holder != "a" || got.Wait < p.Lease/2 {
		t.Fatalf("peer's claim after the claim in doubt was found = %+v, %v; want held by a for most of a lease", got, err)
	}
}
