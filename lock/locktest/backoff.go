package locktest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/slotd/slotd/lock"
)

// testBackoff: a release with a retry backoff (Store.ReleaseAfter) makes every
// claim of the slot answer Early, with Claim.Backoff, until the delay has
// passed by the store's clock, and Late when the delay ends at or after
// the deadline; the backoff wakes watchers as a release does, counts no
// attempt, reads back as State "backoff", has a TTL, and a rerun clears
// it without force.
func testBackoff(t *testing.T, h Harness) {
	b := h.Store
	ctx := context.Background()
	const delay = 1500 * time.Millisecond
	slot := UniqueSlot(t, h)
	w := h.Store.Watch(slot)
	defer w.Stop()
	c := mustClaim(t, h, slot, "a", lock.Won)
	own := lock.Owner{ID: "a", Attempt: c.Attempt}
	if err := b.ReleaseAfter(ctx, slot, own, delay); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.C():
	case <-time.After(5 * time.Second):
		t.Fatal("watcher not woken within 5s of the release with a backoff")
	}
	// A store that knows its clock only within bounds (etcd, ZooKeeper)
	// may lengthen the wait by that uncertainty, never shorten it.
	const uncertainty = time.Second
	early := mustClaim(t, h, slot, "b", lock.Early)
	if !early.Backoff || early.Wait <= 0 || early.Wait > delay+uncertainty {
		t.Fatalf("claim during the backoff = %+v, want Early with Backoff and a wait in (0, %v]", early, delay+uncertainty)
	}
	// The releaser holds nothing any more; a second release (a retry
	// after a lost reply) finds it so and changes nothing.
	if err := b.ReleaseAfter(ctx, slot, own, time.Hour); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("second release: %v, want ErrNotHeld", err)
	}
	if err := h.Store.Renew(ctx, slot, own, h.Policy.Lease); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("renew after release: %v, want ErrNotHeld", err)
	}
	st, err := lock.ReadState(ctx, h.Store, slot)
	if err != nil || st.Status != "backoff" || st.Attempts != 1 || st.NotBefore.IsZero() {
		t.Fatalf("state during the backoff = %+v, %v; want backoff, 1 attempt, its not-before time", st, err)
	}
	for k, ttl := range h.TTLs() {
		if strings.Contains(k, slot.Task) && ttl <= 0 {
			t.Errorf("key %q has no TTL during the backoff", k)
		}
	}
	// Once it has passed by the store's clock, the next attempt is won.
	var won lock.Claim
	for deadline := time.Now().Add(10 * time.Second); ; {
		h.Sleep(early.Wait)
		if won, err = h.Store.Claim(ctx, slot, "b", h.Policy); err != nil {
			t.Fatal(err)
		}
		if won.Result != lock.Early || !won.Backoff || time.Now().After(deadline) {
			break
		}
		early = won
	}
	if won.Result != lock.Won || won.Attempt != c.Attempt+1 {
		t.Fatalf("claim after the backoff = %+v, want won as attempt %d", won, c.Attempt+1)
	}

	// A backoff that ends at or after the deadline: no attempt can start
	// in time, and the claims say so at once.
	late := UniqueSlot(t, h)
	late.Deadline = h.Now().Add(time.Minute)
	c = mustClaim(t, h, late, "a", lock.Won)
	if err := b.ReleaseAfter(ctx, late, lock.Owner{ID: "a", Attempt: c.Attempt}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if lc := mustClaim(t, h, late, "b", lock.Late); !lc.Backoff {
		t.Fatalf("claim of a slot whose backoff passes its deadline = %+v, want Late with Backoff", lc)
	}

	// An operator's rerun clears a backoff without force.
	rr := UniqueSlot(t, h)
	c = mustClaim(t, h, rr, "a", lock.Won)
	if err := b.ReleaseAfter(ctx, rr, lock.Owner{ID: "a", Attempt: c.Attempt}, time.Hour); err != nil {
		t.Fatal(err)
	}
	if out, err := h.Store.Rerun(ctx, rr, false); err != nil || !out.Cleared {
		t.Fatalf("rerun during a backoff = %+v, %v; want cleared", out, err)
	}
	mustClaim(t, h, rr, "b", lock.Won)
}
