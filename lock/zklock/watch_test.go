package zklock_test

import (
	"context"
	"testing"
	"time"

	"github.com/slotd/slotd/lock"
)

// changes collects what a Watch reports through OnChange.
func changes(w *lock.Watch) <-chan lock.Change {
	ch := make(chan lock.Change, 16)
	w.OnChange(func(c lock.Change) {
		select {
		case ch <- c:
		default:
		}
	})
	return ch
}

// wantChange waits for want on ch, skipping other changes (Taken hints).
func wantChange(t *testing.T, ch <-chan lock.Change, want lock.Change, what string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case c := <-ch:
			if c == want {
				return
			}
		case <-deadline:
			t.Fatalf("%s: no %v notice within 10s", what, want)
		}
	}
}

// longLease is the policy of the watch tests: no claim outlasts it, so a
// slot claimed stays held however slowly a loaded run goes (nobody renews).
var longLease = lock.Policy{Lease: 10 * time.Second, DoneTTL: time.Hour, MaxAttempts: 3}

// A WatchClaims watch is armed by its claims, not at once: a claim that
// finds the slot held hears its release; a completion through the store
// is told at once, and arms the watch for an operator's rerun; a release
// through the store is told at once, and arms it for a peer's claim.
func TestWatchClaimsArmedByClaims(t *testing.T) {
	servers, root := shared(t)
	a, b := dialOn(t, servers, 10*time.Second, root), dialOn(t, servers, 10*time.Second, root)
	ctx := context.Background()

	held := openSlot(ctx, t, a, "held")
	got := changes(a.WatchClaims(held))
	cb, err := b.Claim(ctx, held, "b", longLease)
	if err != nil || cb.Result != lock.Won {
		t.Fatalf("b's claim = %+v, %v", cb, err)
	}
	if c, err := a.Claim(ctx, held, "a", longLease); err != nil || c.Result != lock.Held {
		t.Fatalf("a's claim = %+v, %v; want held", c, err)
	}
	if err := b.Release(ctx, held, lock.Owner{ID: "b", Attempt: cb.Attempt}); err != nil {
		t.Fatal(err)
	}
	wantChange(t, got, lock.Released, "a peer's release after a held claim")

	done := openSlot(ctx, t, a, "done")
	got = changes(a.WatchClaims(done))
	ca, err := a.Claim(ctx, done, "a", longLease)
	if err != nil || ca.Result != lock.Won {
		t.Fatalf("a's claim = %+v, %v", ca, err)
	}
	if err := a.Complete(ctx, done, lock.Owner{ID: "a", Attempt: ca.Attempt}, time.Hour); err != nil {
		t.Fatal(err)
	}
	wantChange(t, got, lock.Completed, "its own completion")
	// The completion armed the slot node's watch in the background: a
	// rerun before it was armed is found by the arming's version check.
	if r, err := b.Rerun(ctx, done, false); err != nil || !r.Cleared {
		t.Fatalf("rerun = %+v, %v", r, err)
	}
	wantChange(t, got, lock.Released, "an operator's rerun after its completion")

	failed := openSlot(ctx, t, a, "failed")
	got = changes(a.WatchClaims(failed))
	ca, err = a.Claim(ctx, failed, "a", longLease)
	if err != nil || ca.Result != lock.Won {
		t.Fatalf("a's claim = %+v, %v", ca, err)
	}
	if err := a.Release(ctx, failed, lock.Owner{ID: "a", Attempt: ca.Attempt}); err != nil {
		t.Fatal(err)
	}
	wantChange(t, got, lock.Released, "its own release")
	if c, err := b.Claim(ctx, failed, "b", longLease); err != nil || c.Result != lock.Won {
		t.Fatalf("b's claim after a's release = %+v, %v", c, err)
	}
	wantChange(t, got, lock.Taken, "a peer's claim after its own release")
}

// A Watch armed after the slot was claimed (a deferring replica whose
// watch lost the race with the preferred claimant's claim) is told Taken
// at once, and then the holder's completion.
func TestWatchArmedAfterClaimTellsTaken(t *testing.T) {
	servers, root := shared(t)
	a, b := dialOn(t, servers, 10*time.Second, root), dialOn(t, servers, 10*time.Second, root)
	ctx := context.Background()
	slot := openSlot(ctx, t, a, "late-watch")
	cb, err := b.Claim(ctx, slot, "b", longLease)
	if err != nil || cb.Result != lock.Won {
		t.Fatalf("b's claim = %+v, %v", cb, err)
	}
	got := changes(a.Watch(slot))
	wantChange(t, got, lock.Taken, "a watch armed after the claim")
	if err := b.Complete(ctx, slot, lock.Owner{ID: "b", Attempt: cb.Attempt}, time.Hour); err != nil {
		t.Fatal(err)
	}
	wantChange(t, got, lock.Completed, "the holder's completion")
}
