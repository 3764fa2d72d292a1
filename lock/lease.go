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
// keepalive, which a mutex.Mutex's hold shares), which waits between renewals as an
// entry in the process's one heap of watchdog wakes (no timer or goroutine of
// its own until it renews).
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
	hooks LeaseHooks

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
	// Renewed: a renewal was confirmed. It runs on the watchdog, which
	// waits for it before it schedules the next renewal: a holder renews
	// there what must live as long as its lease (the engine: the task's
	// running record), with one watchdog for both.
	Renewed func()
	Failed  func(err error) // a renewal got an error (the watchdog may try again)
	// Lost: the lease was lost; err, the cause Context is about to be
	// cancelled with (ErrLeaseLost, the slot and why). It runs before
	// Context ends, on the goroutine that found the loss (the watchdog,
	// Hold itself when the claim's reply came too late, a completion).
	Lost func(err error)
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
		ttl:   lease,
		hooks: hooks,
	}
	l.kept.Keep(parent, lease, leaseMargin(s, lease), c.Sent, (*holder)(l))
	l.done = l.kept.Done()
	return l
}

// holder is a Lease as its watchdog sees it (keepalive.Holder).
type holder Lease

func (h *holder) Renew(ctx context.Context) error {
	h.op.Lock()
	defer h.op.Unlock()
	if h.completed {
		return errCompleted
	}
	err := h.store.Renew(ctx, h.slot, h.owner, h.ttl)
	if err != nil && h.hooks.Failed != nil {
		h.hooks.Failed(err)
	}
	return err
}

// Gone: a renewal found the slot someone else's.
func (h *holder) Gone(err error) bool { return errors.Is(err, ErrNotHeld) }

func (h *holder) Renewed() {
	if h.hooks.Renewed != nil {
		h.hooks.Renewed()
	}
}

func (h *holder) OnLost(why error) error {
	cause := fmt.Errorf("%w: %s: %w", ErrLeaseLost, h.slot, why)
	if h.hooks.Lost != nil {
		h.hooks.Lost(cause)
	}
	return cause
}

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
func (l *Lease) renewSoon()                          { l.kept.RenewSoon() }

// Context is cancelled with cause ErrLeaseLost when the lease is lost, and
// when the parent given to Hold is done.
func (l *Lease) Context() context.Context { return l.kept.Context() }

// Margin is how long before its lease could run out l's holder takes it
// as lost: for a record of the holder's own beside the lease under the
// same rule (the engine's running record of a task), valid until the
// lease less Margin after its last renewal confirmed sent.
func (l *Lease) Margin() time.Duration { return leaseMargin(l.store, l.ttl) }

// Token is the attempt's fencing token.
func (l *Lease) Token() int64 { return l.token }

// Owner is the attempt holding the lease.
func (l *Lease) Owner() Owner { return l.owner }

// Lost reports whether the watchdog gave the lease up.
func (l *Lease) Lost() bool { return l.isLost() }

// RenewSoon makes the watchdog's next renewal now, or right after the one
// under way, instead of at its turn: for a holder that renews something
// of its own with the lease (LeaseHooks.Renewed) and has heard that it
// changed. It never blocks, so a store's notification may call it.
func (l *Lease) RenewSoon() { l.renewSoon() }

// Complete marks the slot done and then stops the watchdog. The watchdog
// keeps renewing while the completion is retried: an error of unknown
// outcome (a timeout, a lost reply, a store that refuses writes — OOM, a
// quorum lost) is retried, with backoff, until ctx ends, so that a success
// is not run again by a peer merely because marking it done took longer
// than a lease. The store answers success again when a lost reply had in
// fact completed the slot.
//
// The retries go on after the lease is lost meanwhile (no renewal confirmed
// in time): the task has ended, and every Store's Complete compares the
// slot's state with this attempt's before it writes, so a completion that
// lands proves that no peer claimed the slot since (an attempt's value,
// once gone, never comes back). A store whose hold outlives the lease (a
// ZooKeeper session, an etcd lease kept alive by the replica's other slots
// or extended by an election) can then still be completed after a quorum
// loss; on Redis the key expires and the store answers ErrNotHeld. The
// caller bounds ctx by the slot's deadline, after which no peer starts.
//
// It returns nil once the slot is done; ErrLeaseLost, without trying, if
// the lease was lost before Complete was called (the task was cancelled:
// its slot must not be marked done); ErrNotHeld or ErrForeign from the
// store as they are, wrapped with ErrLeaseLost if the lease was lost
// meanwhile; the last error if ctx ended first; and, without retrying, a
// StoreError that is Applied (the store marked the slot done but could not
// confirm it, as a Redis store whose replicas did not acknowledge the
// write).
func (l *Lease) Complete(ctx context.Context, doneTTL time.Duration) error {
	return l.CompleteWith(ctx, doneTTL, l.store.Complete)
}

// CompleteWith is Complete with complete sent in place of the store's
// Complete: a completion of the same store that does more in the same
// step, as the engine's, which appends the attempt's history entry in the
// completion's own script where the store can. complete must answer as
// Store.Complete does.
func (l *Lease) CompleteWith(ctx context.Context, doneTTL time.Duration, complete func(context.Context, Slot, Owner, time.Duration) error) error {
	if !l.valid() {
		defer l.cancel(context.Canceled)
		l.stop()
		if !l.isLost() { // ran out between two of the watchdog's looks
			l.lose(errNoRenewal)
		}
		return fmt.Errorf("lock: complete %s attempt %d: %w", l.slot, l.owner.Attempt, ErrLeaseLost)
	}
	return l.finish(ctx, "complete", true, func(ctx context.Context) error {
		err := complete(ctx, l.slot, l.owner, doneTTL)
		if err == nil || applied(err) {
			l.completed = true // no renewal after this: it would find the done marker
		}
		return err
	})
}

// Release stops the watchdog and gives the slot back so a peer may retry
// at once, retrying an error of unknown outcome while the lease is valid.
// A lease already lost is released too, in one try: where the store's hold
// outlives the lease (a ZooKeeper session, an etcd lease that the
// replica's other slots keep alive), this is what frees the slot before
// peers find the lease run out. ErrNotHeld and ErrLeaseLost are not errors
// here: the slot is not ours either way.
func (l *Lease) Release(ctx context.Context) error { return l.ReleaseAfter(ctx, 0) }

// valid reports whether the lease is held: not lost, and not run out
// between two of the watchdog's looks.
func (l *Lease) valid() bool { return !l.isLost() && time.Now().Before(l.validUntil()) }

// finish is the one retry loop of Complete and Release: it sends op, never
// while a renewal is under way, and again after an error of unknown
// outcome, with backoff, until the store answers it (nil, ErrNotHeld,
// ErrForeign, an Applied StoreError) or ctx ends. While the lease is valid each
// try is bounded by its validity; after it, a try is bounded by a third of
// the lease, and there is none after the first unless persist (a
// completion: see Complete). With persist the watchdog renews until op
// is answered; without, it is stopped first. The error names op, and
// wraps ErrLeaseLost if the lease was lost before the answer.
func (l *Lease) finish(ctx context.Context, op string, persist bool, f func(context.Context) error) error {
	defer l.cancel(context.Canceled)
	defer l.stop()
	if !persist {
		l.stop()
	}
	// The holder retries its own call, which collides with no peer's: the
	// waits double without jitter, from a thirtieth of the lease to a third.
	backoff := retry.Backoff{Min: max(l.ttl/30, time.Millisecond), Max: l.ttl / 3, NoJitter: true}
	for n := 0; ; n++ {
		until := l.validUntil()
		held := l.valid()
		if !held && persist && !l.isLost() { // ran out between two of the watchdog's looks
			l.stop()
			l.lose(errNoRenewal) // unless the watchdog, stopping, found it first
		}
		if !held {
			until = time.Now().Add(l.ttl / 3)
		}
		err := l.try(ctx, until, f)
		if err == nil || errors.Is(err, ErrNotHeld) || errors.Is(err, ErrForeign) || applied(err) {
			return l.wrap(op, err)
		}
		wait, lostAt := backoff.Delay(n), (<-chan struct{})(nil)
		switch {
		case held && persist:
			// The watchdog runs, and ends when the lease is lost.
			wait, lostAt = min(wait, time.Until(until)), l.done
		case held:
			wait = min(wait, time.Until(until))
		case !persist:
			return l.wrap(op, err)
		}
		select {
		case <-ctx.Done():
			return l.wrap(op, err)
		case <-lostAt:
		case <-time.After(wait):
		}
	}
}

// try sends f once, under ctx and until, never beside a renewal.
func (l *Lease) try(ctx context.Context, until time.Time, f func(context.Context) error) error {
	l.op.Lock()
	defer l.op.Unlock()
	cctx, cancel := context.WithDeadline(ctx, until)
	defer cancel()
	return f(cctx)
}

// wrap names op in err, and ErrLeaseLost if the lease was lost first.
func (l *Lease) wrap(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case l.isLost() || !time.Now().Before(l.validUntil()):
		return fmt.Errorf("lock: %s %s attempt %d: %w (last try: %w)", op, l.slot, l.owner.Attempt, ErrLeaseLost, err)
	default:
		return err
	}
}

// ReleaseAfter is Release with a retry backoff: the slot's next claim, by
// any replica, waits until delay after the release by the store's clock
// (Store.ReleaseAfter). A delay ≤ 0 releases at once.
func (l *Lease) ReleaseAfter(ctx context.Context, delay time.Duration) error {
	err := l.finish(ctx, "release", false, func(ctx context.Context) error {
		return l.store.ReleaseAfter(ctx, l.slot, l.owner, delay)
	})
	if errors.Is(err, ErrNotHeld) || errors.Is(err, ErrLeaseLost) {
		return nil
	}
	return err
}
