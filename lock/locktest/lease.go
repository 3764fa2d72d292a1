package locktest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/slotd/slotd/lock"
)

// LostLeaseBound is how long after its lease a slot whose holder stopped
// renewing may stay held against a live peer (testLostLease): the
// store's expiry and the peer's next look.
const LostLeaseBound = 1500 * time.Millisecond

// testLostLease: a holder that stops renewing while it stays connected —
// frozen for less than a session timeout, or a watchdog that lost its
// lease to failed renewals — holds its slot for its lease and no longer: a
// live peer that claims again when told to (Claim.Wait) wins from a
// lease, less the tenth by which its holder gives the lease up, to a
// lease and LostLeaseBound after the claim.
func testLostLease(t *testing.T, h Harness) {
	slot := UniqueSlot(t, h)
	p := h.Policy
	p.Lease = min(p.Lease, 2*time.Second)
	before := h.Now()
	a, err := h.Store.Claim(context.Background(), slot, "a", p)
	if err != nil || a.Result != lock.Won {
		t.Fatalf("claim by a = %+v, %v; want won", a, err)
	}
	step := p.Lease / 20
	for {
		b, err := h.Store.Claim(context.Background(), slot, "b", p)
		if err != nil {
			t.Fatalf("claim by b: %v", err)
		}
		at := h.Now()
		if b.Result == lock.Won {
			t.Logf("b won %v after a's claim (lease %v)", at.Sub(before), p.Lease)
			// The holder counts its lease from when it sent the claim
			// (Claim.Sent, just after before), not from the reply, which
			// may come late: on a loaded machine a Redlock claim's
			// quorum took 563 ms to answer.
			if held := at.Sub(before); held < p.Lease-p.Lease/10 {
				t.Fatalf("b won %v after a's claim, before a's lease (%v, less a tenth) ran out", held, p.Lease)
			}
			if b.Attempt != a.Attempt+1 {
				t.Fatalf("b's attempt = %d, want %d", b.Attempt, a.Attempt+1)
			}
			break
		}
		// A wait of 0 is a lease in its last millisecond (Redis's PTTL
		// rounds down): CI once claimed just then.
		if b.Result != lock.Held || b.Holder != "a" || b.Wait < 0 || b.Wait > p.Lease {
			t.Fatalf("claim by b = %+v; want held by a with a wait in [0, lease]", b)
		}
		if held := at.Sub(before); held > p.Lease+LostLeaseBound {
			t.Fatalf("slot still held by a %v after its claim, which stopped renewing a %v lease: want free within %v of the lease",
				held, p.Lease, LostLeaseBound)
		}
		h.Sleep(min(b.Wait, step))
	}
	// The holder, back, finds the slot not its own: it changes nothing.
	stale := lock.Owner{ID: "a", Attempt: a.Attempt}
	if err := h.Store.Renew(context.Background(), slot, stale, p.Lease); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("renew by the holder whose lease ran out: %v, want ErrNotHeld", err)
	}
	if err := h.Store.Complete(context.Background(), slot, stale, p.DoneTTL); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("complete by the holder whose lease ran out: %v, want ErrNotHeld", err)
	}
	st, err := lock.ReadState(context.Background(), h.Store, slot)
	if err != nil || st.Status != "running" || st.Holder != "b" {
		t.Fatalf("state = %+v, %v; want running by b", st, err)
	}
}
