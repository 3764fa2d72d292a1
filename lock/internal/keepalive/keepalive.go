// Package keepalive is the watchdog of a lease, the part that a slot's
// lock.Lease and a mutex.Mutex's hold share (as etcd's concurrency.Session
// is apart from what rides on it): it renews every ttl/3 and, when the
// lease is lost, cancels its context. Every lease of the process waits for
// its next renewal in one heap served by one timer (wheel.go).
package keepalive

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/slotd/slotd/retry"
)

// Lease is a lease kept alive by exactly one watchdog: it renews every
// ttl/3 and, when the lease is lost, cancels its context with the cause
// its holder's OnLost returns.
//
// The lease is taken to be valid until ttl (minus a margin) after the last
// acquisition or renewal that the store confirmed was SENT, measured on the
// monotonic clock, so a wall-clock step changes nothing.
//
// One watchdog per lease, but neither a goroutine nor a timer of its own
// between renewals: each lease is an entry in the process's one heap of
// watchdog wakes (wheel.go), served by one timer, and a goroutine runs only
// while it renews. The ten thousand leases of a burst cost ten thousand
// heap entries, and the renewals due on one instant leave together.
type Lease struct {
	ttl, margin    time.Duration
	interval, grid time.Duration
	retry          retry.Backoff // after a renewal of unknown outcome: soon, and steadily (Min only)
	ctx            context.Context
	cancel         context.CancelCauseFunc // cancels ctx, with the holder's cause when lost
	holder         Holder
	done           chan struct{} // closed when the watchdog has ended

	mu       sync.Mutex
	lastSent time.Time // send time of the last confirmed acquisition or renewal
	lost     bool
	stopped  bool               // Stop was called: no renewal after the one under way
	renewing context.CancelFunc // ends the renewal under way; nil between renewals
	again    bool               // RenewSoon was called while a renewal ran

	// The next wake and the place in the heap, under the wheel's lock.
	at  time.Time
	pos int // 1 + index in the heap; 0: not in it (renewing, or ended)
}

// Holder is the owner of a kept lease: what the watchdog asks of it. A
// holder is an interface rather than four funcs so that the owner, which
// outlives its lease's watchdog anyway, is the watchdog's only reference
// to it, at no allocation.
type Holder interface {
	// Renew answers nil when the renewal is confirmed, an error for which
	// Gone is true when the lock is known to be someone else's (the
	// watchdog ends at once), and any other error when the outcome is
	// unknown (it tries again soon, while the lock may still be ours).
	Renew(ctx context.Context) error
	Gone(err error) bool
	// Renewed hears of each confirmed renewal, on the watchdog, which
	// waits for it.
	Renewed()
	// OnLost is called once if the lease is lost, with why, and returns
	// the cause of the lease's context.
	OnLost(why error) error
}

// Keep starts k's watchdog for h's lease of ttl whose acquisition was sent
// at sent, held until margin before it could run out; k's context derives
// from parent. If the acquisition's reply came too late to leave any
// validity, the lease is lost, and the context done, before Keep returns:
// the caller starts its work under the context next, and must find it
// done.
//
// Renewals fall on a grid shared by every lease with the same interval (see
// renewGrid), never later than interval after the last one: the leases
// taken in one burst then wake on the same instant, and their renewals
// leave together in a few pipelines instead of one round trip each.
func (k *Lease) Keep(parent context.Context, ttl, margin time.Duration, sent time.Time, h Holder) {
	k.ttl, k.margin, k.lastSent, k.holder = ttl, margin, sent, h
	k.ctx, k.cancel = context.WithCancelCause(parent)
	k.done = make(chan struct{})
	if !time.Now().Before(k.ValidUntil()) {
		close(k.done)
		k.Lose(errors.New("the reply came after the lease's validity"))
		return
	}
	k.interval = ttl / 3
	k.grid = renewGrid(k.interval)
	k.retry = retry.Backoff{Min: max(k.interval/8, time.Millisecond)}
	k.schedule(onGrid(k.interval, k.grid))
}

// ValidUntil is the end of the lease as far as this process can prove it.
func (k *Lease) ValidUntil() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lastSent.Add(k.ttl - k.margin)
}

// Context is cancelled with OnLost's cause when the lease is lost, and
// when the parent given to Keep is done.
func (k *Lease) Context() context.Context { return k.ctx }

// Cancel cancels the context with cause.
func (k *Lease) Cancel(cause error) { k.cancel(cause) }

// Done is closed when the watchdog has ended.
func (k *Lease) Done() <-chan struct{} { return k.done }

// TTL is the lease's time to live.
func (k *Lease) TTL() time.Duration { return k.ttl }

// RenewSoon brings the watchdog's next renewal forward: now, or right after
// the one under way. It never blocks.
func (k *Lease) RenewSoon() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !watchdogs.wake(k, time.Now()) {
		k.again = true
	}
}

// Lose marks the lease lost and cancels its context, once: a second call
// (the watchdog and a completion may find the lease run out together)
// does nothing.
func (k *Lease) Lose(why error) {
	k.mu.Lock()
	already := k.lost
	k.lost = true
	k.mu.Unlock()
	if !already {
		k.cancel(k.holder.OnLost(why))
	}
}

// Lost reports whether the lease was given up.
func (k *Lease) Lost() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lost
}

// Stop ends the watchdog and waits for it: at once if it waits for its
// next wake, after the renewal under way (which it cancels) otherwise. It
// reports whether the lease is still valid, and until when. A second call
// only reports.
func (k *Lease) Stop() (until time.Time, valid bool) {
	k.mu.Lock()
	k.stopped = true
	cancel := k.renewing
	waiting := watchdogs.remove(k)
	k.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	if waiting { // taken off the heap here: no one else will end it
		k.end(nil)
	}
	<-k.done
	until = k.ValidUntil()
	return until, !k.Lost() && time.Now().Before(until)
}

// ErrNoRenewal is why a lease is lost when no renewal was confirmed in time.
var ErrNoRenewal = errors.New("no renewal confirmed within the lease")

// The watchdog has one owner at a time, which alone may end it: the heap
// while it waits (Stop, by taking it off), else the goroutine that the
// wheel started for its wake (tick, then schedule).

// schedule puts the watchdog back on the heap for its next wake: next from
// now at the latest, and never later than the lease's validity.
func (k *Lease) schedule(next time.Duration) {
	until := time.Until(k.ValidUntil())
	if until <= 0 {
		k.end(ErrNoRenewal)
		return
	}
	k.mu.Lock()
	if k.stopped {
		k.mu.Unlock()
		k.end(nil)
		return
	}
	if k.again {
		k.again, next = false, 0
	}
	watchdogs.add(k, time.Now().Add(min(next, until)))
	k.mu.Unlock()
}

// tick is the watchdog's wake, on a goroutine of its own, started by the
// wheel: renew, or find the lease run out.
func (k *Lease) tick() {
	until := time.Until(k.ValidUntil())
	k.mu.Lock()
	if k.stopped {
		k.mu.Unlock()
		k.end(nil)
		return
	}
	if until <= 0 {
		k.mu.Unlock()
		k.end(ErrNoRenewal)
		return
	}
	rctx, cancel := context.WithTimeout(context.Background(), until)
	k.renewing = cancel
	k.mu.Unlock()
	sent := time.Now()
	err := k.holder.Renew(rctx)
	cancel()
	k.mu.Lock()
	k.renewing = nil
	stopped := k.stopped
	k.mu.Unlock()
	switch {
	case err == nil:
		k.mu.Lock()
		k.lastSent = sent
		k.mu.Unlock()
		k.holder.Renewed()
		// An interval after this renewal was sent, not after its answer:
		// counted from the answer, a store whose renewals steadily took
		// more than about 0.28 of the lease (a third, with the next one's
		// own round trip and the margin) lost every lease it kept; from
		// the send, up to about 0.45 (the next one leaves at once when
		// this one took longer than the interval).
		k.schedule(onGrid(max(k.interval-time.Since(sent), 0), k.grid))
	case k.holder.Gone(err):
		k.end(err)
	case stopped:
		k.end(nil)
	default:
		k.schedule(k.retry.Delay(0))
	}
}

// end ends the watchdog, losing the lease if why is not nil.
func (k *Lease) end(why error) {
	if why != nil {
		k.Lose(why)
	}
	close(k.done)
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
