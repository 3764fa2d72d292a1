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
// Renewals fall on a grid shared by every lease with the same interval (see
// renewGrid), never later than interval after the last one: the watchdogs of
// the leases taken in one burst then wake on the same instant, and their
// renewals leave together in a few pipelines instead of one round trip each.
//
// keepAlive returns why the lock was lost, or nil when ctx ended it.
func keepAlive(ctx context.Context, ttl time.Duration, validUntil func() time.Time,
	renew func(context.Context) error, renewed func(sent time.Time)) error {
	interval := ttl / 3
	retry := max(interval/8, time.Millisecond)
	grid := renewGrid(interval)
	next := onGrid(interval, grid)
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
			next = onGrid(interval, grid)
		case errors.Is(err, ErrNotHeld):
			return err
		case ctx.Err() != nil:
			return nil
		default:
			next = retry
		}
	}
}

// renewGrid is the spacing of the instants renewals fall on: the largest of
// 1, 2 or 5 times a power of ten milliseconds that is at most a quarter of
// interval (at least 1ms). The same interval gives the same grid in every
// watchdog, and most grids share most of their instants.
func renewGrid(interval time.Duration) time.Duration {
	grid := time.Millisecond
	for p := time.Millisecond; ; p *= 10 {
		for _, f := range []time.Duration{1, 2, 5} {
			if p*f > interval/4 {
				return grid
			}
			grid = p * f
		}
	}
}

// onGrid is how long to wait for the last grid instant at most d from now:
// between d minus one grid step and d.
func onGrid(d, grid time.Duration) time.Duration {
	now := time.Now()
	wait := now.Add(d).Truncate(grid).Sub(now.Round(0)) // wall clock: the grid is absolute
	if wait <= 0 || wait > d {
		return d // the wall clock stepped, or d is shorter than a grid step
	}
	return wait
}
