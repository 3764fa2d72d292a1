package lock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/slotd/slotd/lock/internal/keepalive"
	"github.com/slotd/slotd/retry"
)

// Lease is a won claim kept alive by exactly one watchdog (package
// keepalive, which a mutex.Mutex's hold shares), which waits on a timer between renewals (no
// goroutine of its own until it renews).
//
// The watchdog renews every lease/3. The lease is taken to be valid until
// lease (minus a safety margin) after the last renewal that Redis confirmed
// was SENT — measured on the monotonic clock, so a wall-clock step changes
// nothing. When no renewal is confirmed by then, or Redis answers that the
// slot is no longer ours, the watchdog cancels Context with cause
// ErrLeaseLost and stops: the task must stop before a peer can have taken the
// slot over.
type Lease struct {
	kept  keepalive.Lease
	ttl   time.Duration
	done  <-chan struct{} // closed when the watchdog has ended
	store Store
	slot  Slot
	owner Owner
	token int64

	// op makes a renewal and a completion never overlap: a renewal sent
	// after the completion landed would find the done marker and report the
	// lease lost. completed: the slot is ours and done; renew no more.
	op        sync.Mutex
	completed bool
}

// errCompleted is what a renewal answers once the slot is done: not a loss,
// and the watchdog is being stopped.
var errCompleted = errors.New("lock: slot completed")

// LeaseHooks report a lease's renewals, failed renewals and its loss, for
// metrics and readiness. Any may be nil.
type LeaseHooks struct {
	Renewed func()          // a renewal was confirmed
	Failed  func(err error) // a renewal got an error (the watchdog may try again)
	Lost    func(err error) // the lease was lost; err says why
}

// Hold starts the watchdog of claim c, which must be Won, on slot with the
// lease it was claimed with. The lease's Context is derived from parent. If
// the claim's reply came back too late to leave any validity (counted from
// Claim.Sent), the lease is lost, and Context done, before Hold returns.
func Hold(parent context.Context, s Store, slot Slot, owner string, c Claim, lease time.Duration, hooks LeaseHooks) *Lease {
	l := &Lease{
		store: s,
		slot:  slot,
		owner: Owner{ID: owner, Attempt: c.Attempt},
		token: Token(slot.Time, c.Attempt),
	}
	renew := func(ctx context.Context) error {
		l.op.Lock()
		defer l.op.Unlock()
		if l.completed {
			return errCompleted
		}
		err := l.store.Renew(ctx, l.slot, l.owner, l.ttl)
		if err != nil && hooks.Failed != nil {
			hooks.Failed(err)
		}
		return err
	}
	l.ttl = lease
	l.kept.Keep(parent, lease, leaseMargin(s, lease), c.Sent, renew, gone, hooks.Renewed, func(why error) error {
		if hooks.Lost != nil {
			hooks.Lost(why)
		}
		return fmt.Errorf("%w: %s: %w", ErrLeaseLost, l.slot, why)
	})
	l.done = l.kept.Done()
	return l
}

// gone: a renewal found the slot someone else's.
func gone(err error) bool { return errors.Is(err, ErrNotHeld) }

// leaseMargin is how long before a lease could run out its holder gives it
// up: a tenth of the lease, for the work to stop and for clock drift
// between this host and the store, and never less than the margin the
// store asks for (a Redlock store: its drift allowance, so that the lease
// is held against at most its validity).
func leaseMargin(s Store, ttl time.Duration) time.Duration {
	m := ttl / 10
	if d, ok := s.(interface {
		LeaseMargin(time.Duration) time.Duration
	}); ok {
		m = max(m, d.LeaseMargin(ttl))
	}
	return m
}

// The watchdog's state, under the names Complete and finish use.
var errNoRenewal = keepalive.ErrNoRenewal

func (l *Lease) validUntil() time.Time               { return l.kept.ValidUntil() }
func (l *Lease) isLost() bool                        { return l.kept.Lost() }
func (l *Lease) lose(why error)                      { l.kept.Lose(why) }
func (l *Lease) cancel(cause error)                  { l.kept.Cancel(cause) }
func (l *Lease) stop() (until time.Time, valid bool) { return l.kept.Stop() }

// Context is cancelled with cause ErrLeaseLost when the lease is lost, and
// when the parent given to Hold is done.
func (l *Lease) Context() context.Context { return l.kept.Context() }

// Token is the attempt's fencing token.
func (l *Lease) Token() int64 { return l.token }

// Owner is the attempt holding the lease.
func (l *Lease) Owner() Owner { return l.owner }

// Lost reports whether the watchdog gave the lease up.
func (l *Lease) Lost() bool { return l.isLost() }

// Complete marks the slot done and then stops the watchdog. The watchdog
// keeps renewing while the completion is retried: an error of unknown
// outcome (a timeout, a lost reply, a store that refuses writes — OOM) is
// retried, with backoff, for as long as the lease is held and ctx lasts, so
// that a success is not run again by a peer merely because marking it done
// took longer than a lease. The script answers success again when a lost
// reply had in fact completed the slot.
//
// It returns ErrLeaseLost if the lease was lost (no renewal confirmed in
// time, or the slot taken) before the slot could be completed, the last
// error if ctx ended first, ErrNotHeld or ErrForeign from the store as they
// are, and, without retrying, a StoreError that is Applied (the store
// marked the slot done but could not confirm it, as a Redis store whose
// replicas did not acknowledge the write).
func (l *Lease) Complete(ctx context.Context, doneTTL time.Duration) error {
	defer l.cancel(context.Canceled)
	// The holder retries its own call, which collides with no peer's: the
	// waits double without jitter, from a thirtieth of the lease to a third.
	backoff := retry.Backoff{Min: max(l.ttl/30, time.Millisecond), Max: l.ttl / 3, NoJitter: true}
	var err error
	for n := 0; ; n++ {
		until := l.validUntil()
		if l.isLost() || !time.Now().Before(until) {
			l.stop()
			if !l.isLost() { // ran out between two of the watchdog's looks
				l.lose(errNoRenewal)
			}
			if err == nil {
				return fmt.Errorf("lock: complete %s attempt %d: %w", l.slot, l.owner.Attempt, ErrLeaseLost)
			}
			return fmt.Errorf("lock: complete %s attempt %d: %w (last try: %w)", l.slot, l.owner.Attempt, ErrLeaseLost, err)
		}
		err = l.completeOnce(ctx, until, doneTTL)
		if err == nil || errors.Is(err, ErrNotHeld) || errors.Is(err, ErrForeign) || applied(err) {
			l.stop()
			return err
		}
		select {
		case <-ctx.Done():
			l.stop() // the lease runs out by itself
			return err
		case <-l.done: // the watchdog ended: the lease is lost
		case <-time.After(min(backoff.Delay(n), time.Until(until))):
		}
	}
}

// completeOnce sends one completion, never while a renewal is under way, and
// stops the renewals once the slot is done (or done but not confirmed).
func (l *Lease) completeOnce(ctx context.Context, until time.Time, doneTTL time.Duration) error {
	l.op.Lock()
	defer l.op.Unlock()
	cctx, cancel := context.WithDeadline(ctx, until)
	defer cancel()
	err := l.store.Complete(cctx, l.slot, l.owner, doneTTL)
	if err == nil || applied(err) {
		l.completed = true
	}
	return err
}

// Release stops the watchdog and gives the slot back so a peer may retry
// at once. ErrNotHeld from the store is not an error here: the slot is not
// ours either way.
func (l *Lease) Release(ctx context.Context) error {
	err := l.finish(ctx, "release", func(ctx context.Context) error {
		return l.store.Release(ctx, l.slot, l.owner)
	})
	if errors.Is(err, ErrNotHeld) || errors.Is(err, ErrLeaseLost) {
		return nil
	}
	return err
}

func (l *Lease) finish(ctx context.Context, op string, f func(context.Context) error) error {
	defer l.cancel(context.Canceled)
	until, valid := l.stop()
	if !valid {
		return fmt.Errorf("lock: %s %s attempt %d: %w", op, l.slot, l.owner.Attempt, ErrLeaseLost)
	}
	// The holder retries its own call, which collides with no peer's: the
	// waits double without jitter, from a thirtieth of the lease to a third.
	backoff := retry.Backoff{Min: max(l.ttl/30, time.Millisecond), Max: l.ttl / 3, NoJitter: true}
	for n := 0; ; n++ {
		cctx, cancel := context.WithDeadline(ctx, until)
		err := f(cctx)
		cancel()
		if err == nil || errors.Is(err, ErrNotHeld) || errors.Is(err, ErrForeign) || applied(err) {
			return err
		}
		left := time.Until(until)
		if left <= 0 || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(min(backoff.Delay(n), left)):
		}
	}
}
