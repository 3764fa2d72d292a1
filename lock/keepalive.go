package lock

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/slotd/slotd/retry"
)

// keptLease is a lease kept alive by exactly one watchdog, the part that a
// slot's Lease and a Mutex's hold share (as etcd's concurrency.Session): it
// renews every ttl/3 and, when the lease is lost, cancels its context with a
// cause wrapping ErrLeaseLost.
//
// The lease is taken to be valid until ttl (minus leaseMargin) after the last
// acquisition or renewal that the store confirmed was SENT, measured on the
// monotonic clock, so a wall-clock step changes nothing.
//
// One watchdog per lease, but not a goroutine parked for the lease's life:
// between renewals it is a timer, and a goroutine runs only while it renews
// (see startKeepAlive), so the ten thousand leases of a burst cost ten
// thousand timers.
type keptLease struct {
	ttl          time.Duration
	ctx          context.Context         // cancelled with a cause wrapping ErrLeaseLost when lost
	cancel       context.CancelCauseFunc //
	onLost       func(why error) error   // called once the lease is marked lost; returns ctx's cause
	stopWatchdog func()
	renewSoon    func()          // brings the watchdog's next renewal forward
	done         <-chan struct{} // closed when the watchdog has ended

	mu       sync.Mutex
	lastSent time.Time // send time of the last confirmed acquisition or renewal
	lost     bool
}

// keep starts k's watchdog for a lease of ttl whose acquisition was sent at
// sent; k's context derives from parent. renew is as for startKeepAlive;
// renewed, if not nil, hears of each confirmed renewal. onLost is called once
// if the lease is lost, with why, and returns the cause of k's context. If
// the acquisition's reply came too late to leave any validity, the lease is
// lost, and the context done, before keep returns: the caller starts its
// work under the context next, and must find it done.
func (k *keptLease) keep(parent context.Context, ttl time.Duration, sent time.Time,
	renew func(context.Context) error, renewed func(), onLost func(why error) error) {
	k.ttl, k.lastSent, k.onLost = ttl, sent, onLost
	k.ctx, k.cancel = context.WithCancelCause(parent)
	if !time.Now().Before(k.validUntil()) {
		k.stopWatchdog, k.renewSoon = func() {}, func() {}
		done := make(chan struct{})
		close(done)
		k.done = done
		k.lose(errors.New("the reply came after the lease's validity"))
		return
	}
	k.done, k.stopWatchdog, k.renewSoon = startKeepAlive(ttl, k.validUntil, renew, func(sent time.Time) {
		k.mu.Lock()
		k.lastSent = sent
		k.mu.Unlock()
		if renewed != nil {
			renewed()
		}
	}, func(why error) {
		if why != nil {
			k.lose(why)
		}
	})
}

// validUntil is the end of the lease as far as this process can prove it.
func (k *keptLease) validUntil() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lastSent.Add(k.ttl - leaseMargin(k.ttl))
}

// lose marks the lease lost and cancels its context, once: a second call
// (the watchdog and a completion may find the lease run out together)
// does nothing.
func (k *keptLease) lose(why error) {
	k.mu.Lock()
	already := k.lost
	k.lost = true
	k.mu.Unlock()
	if !already {
		k.cancel(k.onLost(why))
	}
}

// isLost reports whether the lease was given up.
func (k *keptLease) isLost() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lost
}

// stop ends the watchdog and waits for it. It reports whether the lease is
// still valid, and until when.
func (k *keptLease) stop() (until time.Time, valid bool) {
	k.stopWatchdog()
	<-k.done
	until = k.validUntil()
	return until, !k.isLost() && time.Now().Before(until)
}

// leaseMargin is how long before a lease could run out its holder gives it
// up: a tenth of the lease, for the work to stop and for clock drift between
// this host and the store, and never less than Redlock's drift, so that on a
// Redlock store the lease is held against at most its validity
// (lease − elapsed − drift, elapsed counted from the acquisition's send).
func leaseMargin(ttl time.Duration) time.Duration { return max(ttl/10, drift(ttl)) }

// startKeepAlive starts the watchdog of a keptLease: renew every ttl/3, and
// give up when no renewal is confirmed before validUntil. validUntil is counted by the caller from the send time
// of the last confirmed acquisition or renewal, on the monotonic clock;
// renewed records the send time of each confirmed renewal, which moves it.
//
// renew answers nil when the renewal is confirmed, an error wrapping
// ErrNotHeld when the lock is known to be someone else's (the watchdog ends
// at once), and any other error when the outcome is unknown (it tries again
// soon, while the lock may still be ours).
//
// Renewals fall on a grid shared by every lease with the same interval (see
// renewGrid), never later than interval after the last one: the watchdogs of
// the leases taken in one burst then wake on the same instant, and their
// renewals leave together in a few pipelines instead of one round trip each.
//
// It returns at once. Between renewals the watchdog is a timer, not a
// goroutine, and stop ends it on the caller's goroutine (a renewal under
// way is cancelled), so that holding and finishing the ten thousand leases
// of a burst starts no goroutine but the timers'. It calls ended exactly
// once, with why the lock was lost or nil when stop ended it, and then
// closes the channel it returned. soon makes the next renewal now, or,
// if one is under way, right after it; it never blocks.
func startKeepAlive(ttl time.Duration, validUntil func() time.Time, renew func(context.Context) error,
	renewed func(sent time.Time), ended func(why error)) (done <-chan struct{}, stop, soon func()) {
	interval := ttl / 3
	k := &keeper{interval: interval, retry: retry.Backoff{Min: max(interval/8, time.Millisecond)}, grid: renewGrid(interval),
		validUntil: validUntil, renew: renew, renewed: renewed, ended: ended, done: make(chan struct{})}
	k.ctx, k.stop = context.WithCancel(context.Background())
	k.schedule(onGrid(interval, k.grid))
	return k.done, func() {
		k.stop() // a renewal under way ends
		k.cancel()
	}, k.soon
}

var errNoRenewal = errors.New("no renewal confirmed within the lease")

// keeper is one watchdog: parked on a timer between renewals; the timer's
// goroutine makes the renewal.
type keeper struct {
	ctx            context.Context    // ends when the watchdog is stopped or ends
	stop           context.CancelFunc // ends ctx
	interval, grid time.Duration
	retry          retry.Backoff // after a renewal of unknown outcome: soon, and steadily (Min only)
	validUntil     func() time.Time
	renew          func(context.Context) error
	renewed        func(sent time.Time)
	ended          func(why error)
	done           chan struct{}

	mu    sync.Mutex
	timer *time.Timer // pending, unless a renewal is running
	again bool        // soon was called while a renewal was running
}

// schedule sets the timer for the next renewal, next from now at the
// latest, and never later than the lease's validity.
func (k *keeper) schedule(next time.Duration) {
	until := time.Until(k.validUntil())
	if until <= 0 {
		k.end(errNoRenewal)
		return
	}
	k.mu.Lock()
	// ctx.Err is read under mu: if it is nil here, cancel (called after
	// ctx ends) will find the timer and stop it.
	if k.ctx.Err() != nil {
		k.mu.Unlock()
		k.end(nil)
		return
	}
	if k.again {
		k.again, next = false, 0
	}
	k.timer = time.AfterFunc(min(next, until), k.tick)
	k.mu.Unlock()
}

// soon moves the pending renewal to now; if a renewal is running, the
// next one follows it at once.
func (k *keeper) soon() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.timer != nil && k.timer.Stop() {
		k.timer.Reset(0)
		return
	}
	k.again = true
}

// cancel ends the watchdog, once ctx has ended, if it is waiting on its
// timer; a renewal under way ends by itself, as its context ends too. A
// second call does nothing.
func (k *keeper) cancel() {
	k.mu.Lock()
	stopped := k.timer != nil && k.timer.Stop()
	k.mu.Unlock()
	if stopped {
		k.end(nil)
	}
}

func (k *keeper) tick() {
	if k.ctx.Err() != nil {
		k.end(nil)
		return
	}
	until := time.Until(k.validUntil())
	if until <= 0 {
		k.end(errNoRenewal)
		return
	}
	sent := time.Now()
	rctx, cancel := context.WithTimeout(k.ctx, until)
	err := k.renew(rctx)
	cancel()
	switch {
	case err == nil:
		k.renewed(sent)
		k.schedule(onGrid(k.interval, k.grid))
	case errors.Is(err, ErrNotHeld):
		k.end(err)
	case k.ctx.Err() != nil:
		k.end(nil)
	default:
		k.schedule(k.retry.Delay(0))
	}
}

func (k *keeper) end(why error) {
	k.stop()
	k.ended(why)
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
