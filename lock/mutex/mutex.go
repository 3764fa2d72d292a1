package mutex

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/internal/keepalive"
)

// MutexOption configures one acquisition.
type MutexOption func(*mutexOptions)

type mutexOptions struct {
	ttl  time.Duration
	wait time.Duration
}

// WithTTL sets the lease of the acquisition (default DefaultTTL, at least
// 10ms). The watchdog renews it every ttl/3 while the lock is held; a
// holder that dies frees the lock within ttl.
func WithTTL(d time.Duration) MutexOption { return func(o *mutexOptions) { o.ttl = d } }

// WithWait makes Do wait up to d for the lock, as Lock does (default 0:
// one attempt, as TryLock).
func WithWait(d time.Duration) MutexOption { return func(o *mutexOptions) { o.wait = d } }

type ownerKey struct{}

// WithOwner returns ctx carrying owner id: locks taken with it (or with a
// context derived from it) by the same id are reentrant, and the nth
// Unlock of a lock taken n times releases it. Without an owner in the
// context each acquisition gets a fresh random one, so it is not reentrant.
// A Mutex's Context carries its owner.
func WithOwner(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, ownerKey{}, id)
}

// OwnerFrom returns the owner id carried by ctx, if any.
func OwnerFrom(ctx context.Context) (string, bool) {
	id, ok := ctx.Value(ownerKey{}).(string)
	return id, ok
}

type mutexKey struct{}

// MutexFrom returns the Mutex whose Context ctx is (or derives from), the
// innermost if locks are nested: how fn in Do reads its fencing token.
func MutexFrom(ctx context.Context) (*Mutex, bool) {
	m, ok := ctx.Value(mutexKey{}).(*Mutex)
	return m, ok
}

func newOwnerID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// Mutex is one acquisition of a named lock. Its Context is cancelled with
// cause ErrLeaseLost when the lock's lease is lost, and when it is
// unlocked.
type Mutex struct {
	l     *Locker
	h     *hold
	ctx   context.Context
	stop  func() bool // detaches ctx from the hold's loss
	close context.CancelCauseFunc

	mu       sync.Mutex
	unlocked bool
}

// Context is derived from the context the lock was taken with, carries the
// owner (so a lock taken with it again is a reentry) and the Mutex (see
// MutexFrom), and is cancelled with
// a cause wrapping ErrLeaseLost when the watchdog could not renew the lease
// in time or found it taken: the work it guards must stop.
func (m *Mutex) Context() context.Context { return m.ctx }

// Token is the fencing token of the hold: greater than the token of every
// earlier hold of the same lock, as long as the lock's fence counter lived
// in between (it lives while the lock is held and for the Locker's fence TTL
// after its last use; a new counter starts at the server's clock in
// microseconds, which keeps tokens growing unless that clock went back). A
// reentry shares the token of the hold it enters.
func (m *Mutex) Token() int64 { return m.h.token }

// Name is the lock's name.
func (m *Mutex) Name() string { return m.h.name }

// Owner is the owner id holding the lock.
func (m *Mutex) Owner() string { return m.h.owner }

// Unlock undoes this acquisition: the lock is free again when every
// acquisition of its owner is undone, and then the waiters in Lock are
// woken. The call is bounded by the node timeout; it is made once, as a
// retry after a lost reply could undo a reentry twice (on an unknown
// outcome the lock expires within its ttl). Errors: ErrNotHeld when the
// lock was not this owner's any more (or Unlock was called before);
// ErrLeaseLost when the watchdog had given the lease up (nothing is sent).
// The Mutex's Context is cancelled either way.
func (m *Mutex) Unlock(ctx context.Context) error {
	m.mu.Lock()
	done := m.unlocked
	m.unlocked = true
	m.mu.Unlock()
	if done {
		return fmt.Errorf("lock: unlock %q: already unlocked: %w", m.h.name, lock.ErrNotHeld)
	}
	m.stop()
	defer m.close(context.Canceled)
	return m.l.unlock(ctx, m.h)
}

// TryLock makes one attempt at the lock name. Errors: ErrNotObtained when
// another owner holds it; ErrForeign when its key holds something this
// package did not write; any other error when the outcome is unknown (a
// partial acquisition expires within the ttl).
func (l *Locker) TryLock(ctx context.Context, name string, opts ...MutexOption) (*Mutex, error) {
	o, err := l.options(name, opts)
	if err != nil {
		return nil, err
	}
	m, _, err := l.try(ctx, name, o)
	return m, err
}

// Lock takes the lock name, waiting up to wait while another owner holds
// it. A waiter sleeps until the holder unlocks (a pub/sub message from the
// release script, on one subscription per Locker) or until the holder's
// remaining ttl has passed (in case a message is lost, or the holder died):
// it never polls. A wait of 0 makes one attempt, as TryLock. Errors:
// ErrNotObtained when the wait ran out; the
// context's cause when ctx ended first; as TryLock otherwise.
func (l *Locker) Lock(ctx context.Context, name string, wait time.Duration, opts ...MutexOption) (*Mutex, error) {
	o, err := l.options(name, opts)
	if err != nil {
		return nil, err
	}
	if wait < 0 {
		return nil, fmt.Errorf("lock: lock %q: negative wait %v", name, wait)
	}
	o.wait = wait
	return l.lock(ctx, name, o)
}

// Do runs fn under the lock name, as a method annotated to be locked would
// run: it takes the lock (waiting up to WithWait, default no wait), runs fn
// with the Mutex's Context (cancelled with cause ErrLeaseLost if the lease
// is lost), and unlocks afterwards, also when fn panics, on a context that
// ctx's cancellation does not stop (bounded by the node timeout). Errors:
// as Lock when the lock is not taken (fn does not run); otherwise fn's error,
// joined with one wrapping ErrLeaseLost if the lease was lost while fn ran
// (fn may have run partly unprotected), or the Unlock error.
func (l *Locker) Do(ctx context.Context, name string, fn func(ctx context.Context) error, opts ...MutexOption) (err error) {
	o, err := l.options(name, opts)
	if err != nil {
		return err
	}
	m, err := l.lock(ctx, name, o)
	if err != nil {
		return err
	}
	defer func() {
		lost := context.Cause(m.ctx)
		uerr := m.Unlock(context.WithoutCancel(ctx))
		if errors.Is(lost, lock.ErrLeaseLost) {
			uerr = lost // the loss, not the refusal to unlock, is the news
		}
		err = errors.Join(err, uerr)
	}()
	return fn(m.Context())
}

func (l *Locker) options(name string, opts []MutexOption) (mutexOptions, error) {
	o := mutexOptions{ttl: DefaultTTL}
	for _, f := range opts {
		f(&o)
	}
	switch {
	case name == "":
		return o, errors.New("lock: empty lock name")
	case strings.ContainsAny(name, "{}"):
		return o, fmt.Errorf("lock: lock name %q: braces are reserved for the Cluster hash tag", name)
	case o.ttl < minTTL:
		return o, fmt.Errorf("lock: lock %q: ttl %v: at least %v", name, o.ttl, minTTL)
	case o.wait < 0:
		return o, fmt.Errorf("lock: lock %q: negative wait %v", name, o.wait)
	}
	return o, nil
}

func (l *Locker) lock(ctx context.Context, name string, o mutexOptions) (*Mutex, error) {
	if o.wait == 0 {
		m, _, err := l.try(ctx, name, o)
		return m, err
	}
	// Subscribed (and confirmed) before the first attempt, so that an
	// unlock published after that attempt is not missed.
	if err := l.sub.Confirm(ctx); err != nil {
		return nil, err
	}
	key := lockKey(l.prefix, name)
	w := lock.NewWatch(func() {})
	l.sub.Add(key, w)
	defer l.sub.Remove(key, w)
	deadline := time.Now().Add(o.wait)
	for {
		m, after, err := l.try(ctx, name, o)
		if !errors.Is(err, ErrNotObtained) {
			return m, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, fmt.Errorf("lock: lock %q: still held after waiting %v: %w", name, o.wait, ErrNotObtained)
		}
		t := time.NewTimer(min(left, after))
		if l.waiting != nil {
			l.waiting(name)
		}
		byMessage := false
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("lock: lock %q: %w", name, context.Cause(ctx))
		case <-w.C():
			t.Stop()
			byMessage = true
		case <-t.C:
		}
		if l.woken != nil {
			l.woken(name, byMessage)
		}
	}
}

// try makes one acquisition. On ErrNotObtained it says how long to wait
// before the next: the holder's remaining ttl, or a random delay after a
// split vote.
func (l *Locker) try(ctx context.Context, name string, o mutexOptions) (*Mutex, time.Duration, error) {
	owner, ok := OwnerFrom(ctx)
	if !ok {
		owner = newOwnerID()
		ctx = WithOwner(ctx, owner)
	} else if owner == "" {
		return nil, 0, fmt.Errorf("lock: lock %q: empty owner id in context", name)
	}
	k := holdKey{name, owner}
	l.mu.Lock()
	_, reentry := l.holds[k]
	l.mu.Unlock()
	a, err := l.acquire(ctx, name, owner, o.ttl, reentry)
	if err != nil {
		return nil, a.retry, err
	}
	h := l.join(k)
	if h == nil {
		// Started outside l.mu: a watchdog that finds the lease already
		// run out loses it at once, and losing a hold takes l.mu.
		nh := l.newHold(name, owner, o.ttl, a.token, a.sent)
		l.mu.Lock()
		if h = l.holds[k]; h == nil {
			h = nh
			if !nh.Lost() {
				l.holds[k] = nh
			}
		}
		h.refs++
		l.mu.Unlock()
		if h != nh { // a concurrent acquisition by the same owner made one first
			nh.Stop()
			nh.Cancel(context.Canceled)
		}
	}
	m := &Mutex{l: l, h: h}
	m.ctx, m.close = context.WithCancelCause(context.WithValue(ctx, mutexKey{}, m))
	m.stop = context.AfterFunc(h.Context(), func() { m.close(context.Cause(h.Context())) })
	return m, 0, nil
}

// join adds a reference to the hold k, if there is one.
func (l *Locker) join(k holdKey) *hold {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := l.holds[k]
	if h != nil {
		h.refs++
	}
	return h
}

func (l *Locker) unlock(ctx context.Context, h *hold) error {
	l.mu.Lock()
	h.refs--
	last := h.refs == 0
	if last && l.holds[holdKey{h.name, h.owner}] == h {
		delete(l.holds, holdKey{h.name, h.owner})
	}
	l.mu.Unlock()
	if last {
		h.Stop()
		h.Cancel(context.Canceled) // nothing is attached to it any more
	}
	if h.Lost() {
		return fmt.Errorf("lock: unlock %q: %w", h.name, lock.ErrLeaseLost)
	}
	left, err := l.release(ctx, h.name, h.owner, h.TTL())
	if err == nil && left == 0 && !last {
		// Redis freed it, yet other Mutexes here hold it: an acquisition by
		// the same owner id elsewhere undid ours. They are unprotected now.
		h.Lose(fmt.Errorf("released by another user of owner id %q: %w", h.owner, lock.ErrNotHeld))
	}
	return err
}

// hold is one owner's hold of one lock through a Locker, shared by the
// owner's reentrant Mutexes, kept by exactly one watchdog (package keepalive, as a
// slot's lock.Lease).
type hold struct {
	keepalive.Lease
	l           *Locker
	name, owner string
	token       int64
	refs        int // Mutexes sharing it; under l.mu
}

func (l *Locker) newHold(name, owner string, ttl time.Duration, token int64, sent time.Time) *hold {
	h := &hold{l: l, name: name, owner: owner, token: token}
	h.Keep(context.Background(), ttl, leaseMargin(ttl), sent, (*holdKeeper)(h))
	return h
}

// holdKeeper is a hold as its watchdog sees it (keepalive.Holder).
type holdKeeper hold

func (k *holdKeeper) Renew(ctx context.Context) error {
	return k.l.renew(ctx, k.name, k.owner, k.TTL())
}
func (k *holdKeeper) Gone(err error) bool { return gone(err) }
func (k *holdKeeper) Renewed()            {}

func (k *holdKeeper) OnLost(why error) error {
	h := (*hold)(k)
	h.l.mu.Lock()
	if h.l.holds[holdKey{h.name, h.owner}] == h {
		delete(h.l.holds, holdKey{h.name, h.owner})
	}
	h.l.mu.Unlock()
	return fmt.Errorf("%w: lock %q: %w", lock.ErrLeaseLost, h.name, why)
}
