package lock

import (
	"context"
	"errors"
	"time"
)

// keepAlive is the watchdog loop shared by Lease (a slot) and Mutex (a named
// lock): renew every ttl/3, and give up when no renewal is confirmed before
// validUntil. validUntil is counted by the caller from the send time of the
// last confirmed acquisition or renewal, on the monotonic clock; renewed
// records the send time of each confirmed renewal, which moves it.
//
// renew answers nil when the renewal is confirmed, an error wrapping
// ErrNotHeld when the lock is known to be someone else's (the loop ends at
// once), and any other error when the outcome is unknown (the loop tries
// again soon, while the lock may still be ours).
//
// keepAlive returns why the lock was lost, or nil when ctx ended it.
func keepAlive(ctx context.Context, ttl time.Duration, validUntil func() time.Time,
	renew func(context.Context) error, renewed func(sent time.Time)) error {
	interval := ttl / 3
	retry := max(interval/8, time.Millisecond)
	next := interval
	noRenewal := errors.New("no renewal confirmed within the lease")
	for {
		until := time.Until(validUntil())
		if until <= 0 {
			return noRenewal
		}
		t := time.NewTimer(min(next, until))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		until = time.Until(validUntil())
		if until <= 0 {
			return noRenewal
		}
		sent := time.Now()
		rctx, cancel := context.WithTimeout(ctx, until)
		err := renew(rctx)
		cancel()
		switch {
		case err == nil:
			renewed(sent)
			next = interval
		case errors.Is(err, ErrNotHeld):
			return err
		case ctx.Err() != nil:
			return nil
		default:
			next = retry
		}
	}
}
