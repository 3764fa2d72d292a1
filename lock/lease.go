package lock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/slotd/slotd/retry"
)

// Lease is a won claim kept alive by exactly one watchdog (a keptLease,
// which a Mutex's hold shares), which waits on a timer between renewals (no
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
	keptLease
	store Store
	slot  Slot
	owner Owner
	token int64
}

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
func Hold(parent context.Context, s Store, slot Slot, replica string, c Claim, lease time.Duration, hooks LeaseHooks) *Lease {
	l := &Lease{
		store: s,
		slot:  slot,
		owner: Owner{Replica: replica, Attempt: c.Attempt},
		token: Token(slot.Time, c.Attempt),
	}
	renew := func(ctx context.Context) error {
		err := l.store.Renew(ctx, l.slot, l.owner, l.ttl)
		if err != nil && hooks.Failed != nil {
			hooks.Failed(err)
		}
		return err
	}
	l.keep(parent, lease, c.Sent, renew, hooks.Renewed, func(why error) error {
		if hooks.Lost != nil {
			hooks.Lost(why)
		}
		return fmt.Errorf("%w: %s: %w", ErrLeaseLost, l.slot, why)
	})
	return l
}

// Context is cancelled with cause ErrLeaseLost when the lease is lost, and
// when the parent given to Hold is done.
func (l *Lease) Context() context.Context { return l.ctx }

// Token is the attempt's fencing token.
func (l *Lease) Token() int64 { return l.token }

// Owner is the attempt holding the lease.
func (l *Lease) Owner() Owner { return l.owner }

// Lost reports whether the watchdog gave the lease up.
func (l *Lease) Lost() bool { return l.isLost() }

// Complete stops the watchdog and marks the slot done. It retries errors of
// unknown outcome while the lease may still be valid; the script answers
// success again when a lost reply had in fact completed the slot. It returns
// ErrLeaseLost if the lease was lost before the slot could be completed,
// and ErrNotReplicated, without retrying, if the slot was marked done but
// not acknowledged by the replicas WithMinReplicasAck asks for.
func (l *Lease) Complete(ctx context.Context, doneTTL time.Duration) error {
	return l.finish(ctx, "complete", func(ctx context.Context) error {
		return l.store.Complete(ctx, l.slot, l.owner, doneTTL)
	})
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
		if err == nil || errors.Is(err, ErrNotHeld) || errors.Is(err, ErrForeign) || errors.Is(err, ErrNotReplicated) {
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
