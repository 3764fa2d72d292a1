package lock

import "time"

// AfterBackoff answers claim c, which found the backoff value v, by the
// store's clock now: Early until v.NotBefore (Claim.Backoff set), or Late
// if that is not before slot's deadline; ok is false once it has passed
// (the slot is free). For the stores that keep a backoff as the state
// value (every one of slotd's).
func (c Claim) AfterBackoff(slot Slot, v Value, now time.Time) (Claim, bool) {
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
