package lock

import (
	"context"
	"time"
)

// Backoffer is a store whose release can hold a slot back for a retry
// backoff, fleet-wide: the not-before time is kept in the store with the
// release, by the store's clock, so whichever replica claims next — this
// one, a peer, or a process started after this one was killed — waits for
// it. Every store of slotd implements it.
type Backoffer interface {
	// ReleaseAfter is Store.Release, except that until delay after the
	// release by the store's clock the slot's claims answer Early, with
	// Claim.Backoff set and Claim.Wait the time left — or Late, if the
	// delay ends at or after the slot's deadline (no attempt can start in
	// time). A delay ≤ 0 is Release. An operator's rerun clears the
	// backoff with the rest of the state.
	ReleaseAfter(ctx context.Context, slot Slot, owner Owner, delay time.Duration) error
}

// BackoffClaim answers a claim that found the backoff value v by the
// store's clock now: Early until v.NotBefore (Claim.Backoff set), or Late
// if that is not before slot's deadline; ok is false once it has passed
// (the slot is free). For the stores that keep a backoff as the state
// value (every one of slotd's).
func BackoffClaim(c Claim, slot Slot, v Value, now time.Time) (Claim, bool) {
	switch {
	case !v.NotBefore.Before(slot.Deadline):
		c.Result, c.Backoff = Late, true
	case now.Before(v.NotBefore):
		c.Result, c.Backoff, c.Wait = Early, true, v.NotBefore.Sub(now)
	default:
		return c, false
	}
	return c, true
}
