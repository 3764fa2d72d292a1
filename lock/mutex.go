package lock

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/retry"
)

// The general-purpose lock: the slot protocol's machinery (owner-checked Lua,
// a watchdog that cancels a context before the lease can run out, pub/sub
// wake-ups, fencing) for any resource a task plugin names.
//
// Keys (prefix "slotd"; the braces are a Redis Cluster hash tag, so that one
// lock's two keys share a shard and one script can touch both):
//
//	slotd:lock:{<name>}        hash: owner, count (reentrant acquisitions), token; TTL the lock's ttl
//	slotd:lock:{<name>}:fence  fencing counter; TTL max(ttl, fence TTL), refreshed by every acquire and renew
//	slotd:lock:released        pub/sub channel; message = lock key

var (
	//go:embed mutex_acquire.lua
	mutexAcquireLua    string
	mutexAcquireScript = redis.NewScript(mutexAcquireLua)
	//go:embed mutex_renew.lua
	mutexRenewLua    string
	mutexRenewScript = redis.NewScript(mutexRenewLua)
	//go:embed mutex_release.lua
	mutexReleaseLua    string
	mutexReleaseScript = redis.NewScript(mutexReleaseLua)
	//go:embed mutex_fence.lua
	mutexFenceLua    string
	mutexFenceScript = redis.NewScript(mutexFenceLua)
)

// ErrNotObtained is returned by TryLock when another owner holds the lock,
// and by Lock and Do when it was still held when the wait ran out.
var ErrNotObtained = errors.New("lock: not obtained")

// Defaults of a Locker and of each acquisition.
const (
	DefaultTTL      = 30 * time.Second // lease of one acquisition, renewed every ttl/3
	DefaultFenceTTL = 24 * time.Hour   // how long an idle lock's fencing counter lives
	minTTL          = 10 * time.Millisecond
)

// Locker hands out named locks on one Redis (a single server, a Sentinel
// failover client or a Cluster client) or, built by NewRedlockLocker, on a
// quorum of independent masters. It is safe for concurrent use. Close stops
// its pub/sub subscription and the watchdogs of locks still held.
type Locker struct {
	nodes       []Client
	prefix      string
	channel     string
	fenceTTL    time.Duration
	nodeTimeout time.Duration // 0: ttl/3 on one node, ttl/10 on a quorum

	mu     sync.Mutex
	holds  map[holdKey]*hold // one watchdog per (name, owner) held through this Locker
	watch  watchers          // Lock's waiters, by lock key
	closed bool

	// waiting and woken, when set, tell tests that a Lock call went to sleep
	// and why it woke (by a pub/sub message or by its timer).
	waiting func(name string)
	woken   func(name string, byMessage bool)

	subMu   sync.Mutex      // held while subscribing, not l.mu
	subs    []*redis.PubSub // one per node, started by the first Lock
	subDone sync.WaitGroup
}

type holdKey struct{ name, owner string }

// LockerOption configures a Locker.
type LockerOption func(*Locker)

// WithPrefix sets the key prefix (default "slotd"); keys are
// <prefix>:lock:{<name>}.
func WithPrefix(prefix string) LockerOption { return func(l *Locker) { l.prefix = prefix } }

// WithFenceTTL sets how long a lock's fencing counter outlives its last
// acquisition or renewal (default DefaultFenceTTL). See Mutex.Token.
func WithFenceTTL(d time.Duration) LockerOption { return func(l *Locker) { l.fenceTTL = d } }

// WithNodeTimeout bounds each call to each node (default ttl/3 on one
// node, ttl/10 on a Redlock quorum, as the Redlock algorithm wants a node
// timeout small against the lease).
func WithNodeTimeout(d time.Duration) LockerOption { return func(l *Locker) { l.nodeTimeout = d } }

// NewLocker returns a Locker on rdb. It does no I/O. rdb must be built with
// ContextTimeoutEnabled, as for NewRedis.
func NewLocker(rdb Client, opts ...LockerOption) *Locker {
	return newLocker([]Client{rdb}, opts)
}

// NewRedlockLocker returns a Locker whose every acquisition, renewal and
// release runs on all of nodes in parallel, each independent masters
// (Redlock): an acquisition holds when a quorum of len(nodes)/2+1 of them
// granted it within its validity (ttl − elapsed − drift, drift = ttl/100 +
// 2ms). It is an error to pass no nodes or a nil one.
func NewRedlockLocker(nodes []Client, opts ...LockerOption) (*Locker, error) {
	if len(nodes) == 0 {
		return nil, errors.New("lock: redlock locker: no nodes")
	}
	for i, n := range nodes {
		if n == nil {
			return nil, fmt.Errorf("lock: redlock locker: node %d is nil", i)
		}
	}
	return newLocker(append([]Client(nil), nodes...), opts), nil
}

func newLocker(nodes []Client, opts []LockerOption) *Locker {
	l := &Locker{nodes: nodes, prefix: "slotd", fenceTTL: DefaultFenceTTL, holds: map[holdKey]*hold{}}
	for _, o := range opts {
		o(l)
	}
	l.channel = l.prefix + ":lock:released"
	return l
}

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

// LockKey returns the Redis key of the lock name under prefix.
func LockKey(prefix, name string) string { return prefix + ":lock:{" + name + "}" }

func fenceKey(lockKey string) string { return lockKey + ":fence" }

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
		return fmt.Errorf("lock: unlock %q: already unlocked: %w", m.h.name, ErrNotHeld)
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
		if errors.Is(lost, ErrLeaseLost) {
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
	if err := l.subscribe(ctx); err != nil {
		return nil, err
	}
	key := LockKey(l.prefix, name)
	w := &Watch{c: make(chan struct{}, 1)}
	l.mu.Lock()
	l.watch.add(key, w)
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.watch.remove(key, w)
		l.mu.Unlock()
	}()
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
	l.mu.Lock()
	h := l.holds[k]
	if h == nil {
		h = l.newHold(name, owner, o.ttl, a.token, a.sent)
		l.holds[k] = h
	}
	h.refs++
	l.mu.Unlock()
	m := &Mutex{l: l, h: h}
	m.ctx, m.close = context.WithCancelCause(context.WithValue(ctx, mutexKey{}, m))
	m.stop = context.AfterFunc(h.ctx, func() { m.close(context.Cause(h.ctx)) })
	return m, 0, nil
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
		h.stop()
		h.cancel(context.Canceled) // nothing is attached to it any more
	}
	if h.isLost() {
		return fmt.Errorf("lock: unlock %q: %w", h.name, ErrLeaseLost)
	}
	left, err := l.release(ctx, h.name, h.owner, h.ttl)
	if err == nil && left == 0 && !last {
		// Redis freed it, yet other Mutexes here hold it: an acquisition by
		// the same owner id elsewhere undid ours. They are unprotected now.
		h.lose(fmt.Errorf("released by another user of owner id %q: %w", h.owner, ErrNotHeld))
	}
	return err
}

// Close stops the pub/sub subscriptions and the watchdogs of the locks still
// held through l, whose Mutex contexts are cancelled with ErrLeaseLost (the
// locks expire within their ttl), and waits for their goroutines. It does
// not close the go-redis clients, which the caller owns.
func (l *Locker) Close() error {
	l.subMu.Lock()
	defer l.subMu.Unlock()
	l.mu.Lock()
	l.closed = true
	subs := l.subs
	l.subs = nil
	holds := make([]*hold, 0, len(l.holds))
	for k, h := range l.holds {
		holds = append(holds, h)
		delete(l.holds, k)
	}
	l.mu.Unlock()
	for _, h := range holds {
		h.stop()
		h.lose(errors.New("locker closed"))
	}
	var errs []error
	for _, ps := range subs {
		errs = append(errs, ps.Close())
	}
	l.subDone.Wait()
	return errors.Join(errs...)
}

// subscribe starts one subscription per node to the release channel, once,
// and waits until Redis has confirmed it, so that an unlock published after
// a waiter's first attempt is not missed. On a quorum, a node that does not
// confirm is left to go-redis to reconnect: its waiters still wake on the
// other nodes' messages, or on the holder's ttl.
func (l *Locker) subscribe(ctx context.Context) error {
	l.subMu.Lock()
	defer l.subMu.Unlock()
	l.mu.Lock()
	closed := l.closed
	l.mu.Unlock()
	if closed {
		return errors.New("lock: locker closed")
	}
	if l.subs != nil {
		return nil
	}
	subs := make([]*redis.PubSub, len(l.nodes))
	for i, c := range l.nodes {
		subs[i] = c.Subscribe(ctx, l.channel)
	}
	res := fanOut(ctx, subs, l.timeout(DefaultTTL), func(ctx context.Context, ps *redis.PubSub) (any, error) {
		return ps.Receive(ctx)
	})
	if len(subs) == 1 && res[0].Err != nil {
		_ = subs[0].Close()
		return fmt.Errorf("lock: subscribe %s: %w", l.channel, res[0].Err)
	}
	for _, ps := range subs {
		ch := ps.Channel(redis.WithChannelHealthCheckInterval(30 * time.Second))
		l.subDone.Add(1)
		go func() {
			defer l.subDone.Done()
			for msg := range ch {
				l.mu.Lock()
				l.watch.notify(msg.Payload, false)
				l.mu.Unlock()
			}
		}()
	}
	l.subs = subs
	return nil
}

// timeout is the bound of one call to one node for a lock of ttl.
func (l *Locker) timeout(ttl time.Duration) time.Duration {
	switch {
	case l.nodeTimeout > 0:
		return l.nodeTimeout
	case len(l.nodes) == 1:
		return ttl / 3
	default:
		return ttl / 10
	}
}

// leaseMargin is how long before a lease could run out its holder gives it
// up: a tenth of it (as a Lease), and never less than Redlock's drift.
func leaseMargin(ttl time.Duration) time.Duration { return max(ttl/10, drift(ttl)) }

// each runs op on every node, in parallel when there are several.
func each[T any](ctx context.Context, l *Locker, timeout time.Duration, op func(context.Context, Client) (T, error)) []nodeResult[T] {
	if len(l.nodes) == 1 {
		c, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		v, err := op(c, l.nodes[0])
		return []nodeResult[T]{{Val: v, Err: err}}
	}
	return fanOut(ctx, l.nodes, timeout, op)
}

type acquired struct {
	kind  string // obtained, reentered, held, foreign
	token int64
	pttl  time.Duration
}

// acquisition is the outcome of one round of acquire.
type acquisition struct {
	token int64
	sent  time.Time
	retry time.Duration // not obtained: wait this long before trying again
}

func (l *Locker) acquire(ctx context.Context, name, owner string, ttl time.Duration, reentry bool) (acquisition, error) {
	key := LockKey(l.prefix, name)
	keys := []string{key, fenceKey(key)}
	fence := max(ttl, l.fenceTTL)
	a := acquisition{sent: time.Now()}
	res := each(ctx, l, l.timeout(ttl), func(ctx context.Context, c Client) (acquired, error) {
		r, err := mutexAcquireScript.Run(ctx, c, keys, owner, ttl.Milliseconds(), fence.Milliseconds()).Slice()
		if err != nil {
			return acquired{}, err
		}
		if len(r) != 4 {
			return acquired{}, fmt.Errorf("unexpected reply %v", r)
		}
		kind, _ := r[0].(string)
		token, _ := r[2].(int64)
		pttl, _ := r[3].(int64)
		return acquired{kind: kind, token: token, pttl: time.Duration(pttl) * time.Millisecond}, nil
	})
	var (
		won, held, reentered int
		fresh                bool // some node drew a new token
		wait                 time.Duration
		errs                 []error
	)
	for i, r := range res {
		switch {
		case r.Err != nil:
			errs = append(errs, l.nodeErr(i, r.Err))
		case r.Val.kind == "obtained" || r.Val.kind == "reentered":
			won++
			a.token = max(a.token, r.Val.token)
			fresh = fresh || r.Val.kind == "obtained"
			if r.Val.kind == "reentered" {
				reentered++
			}
		case r.Val.kind == "held":
			held++
			pttl := r.Val.pttl
			if pttl <= 0 { // expiring now, or (not written here) no TTL
				pttl = min(pttl+ttl, ttl)
			}
			if wait == 0 || pttl < wait {
				wait = pttl
			}
		case r.Val.kind == "foreign":
			errs = append(errs, l.nodeErr(i, fmt.Errorf("%w: key %s is not a lock hash", ErrForeign, key)))
		default:
			errs = append(errs, l.nodeErr(i, fmt.Errorf("unexpected reply %q", r.Val.kind)))
		}
	}
	q := quorum(len(l.nodes))
	valid := func() bool { return time.Now().Before(a.sent.Add(ttl - leaseMargin(ttl))) }
	if won >= q && valid() && fresh && len(l.nodes) > 1 {
		// Make the quorum's token the floor of every node it reached, so the
		// next quorum (which shares a node with this one) draws a greater one.
		acks := 0
		for _, r := range each(ctx, l, l.timeout(ttl), func(ctx context.Context, c Client) (int, error) {
			return mutexFenceScript.Run(ctx, c, []string{fenceKey(key)}, a.token, fence.Milliseconds()).Int()
		}) {
			if r.Err == nil {
				acks++
			}
		}
		if acks < q {
			won = 0
			errs = append(errs, fmt.Errorf("fencing token raised on %d of %d nodes", acks, len(l.nodes)))
		}
	}
	if won >= q {
		if valid() {
			return a, nil
		}
		errs = append(errs, fmt.Errorf("granted after its validity ran out (the round took %v of a %v ttl)", time.Since(a.sent).Round(time.Millisecond), ttl))
	}
	// Not held: undo what this round did, on the nodes that granted it (and,
	// unless it was a reentry, on those whose answer was lost).
	undo := make([]bool, len(res))
	some := false
	for i, r := range res {
		undo[i] = (r.Err == nil && (r.Val.kind == "obtained" || r.Val.kind == "reentered")) || (r.Err != nil && reentered == 0 && !reentry)
		some = some || undo[i]
	}
	if some {
		uctx := context.WithoutCancel(ctx)
		fanOut(uctx, l.pick(undo), l.timeout(ttl), func(ctx context.Context, c Client) (int, error) {
			return mutexReleaseScript.Run(ctx, c, []string{key}, owner, l.channel).Int()
		})
	}
	switch {
	case won+held == 0:
		return a, fmt.Errorf("lock: lock %q: %w", name, errors.Join(errs...))
	case held > 0 && won == 0 && len(errs) == 0:
		a.retry = wait + time.Millisecond
		return a, fmt.Errorf("lock: lock %q: %w", name, ErrNotObtained)
	default:
		// A split vote, a late reply or a failed fence: Redlock's random
		// delay before the next round, so that contenders do not collide again.
		a.retry = retry.Backoff{Min: time.Millisecond, Max: time.Millisecond + max(ttl/20, 2*time.Millisecond)}.Jitter()
		if held > 0 {
			a.retry = min(a.retry, wait+time.Millisecond)
		}
		errs = append([]error{ErrNotObtained, fmt.Errorf("%d of %d nodes granted it, %d needed", won, len(l.nodes), q)}, errs...)
		return a, fmt.Errorf("lock: lock %q: %w", name, errors.Join(errs...))
	}
}

func (l *Locker) nodeErr(i int, err error) error {
	if len(l.nodes) == 1 {
		return err
	}
	return fmt.Errorf("node %d: %w", i, err)
}

func (l *Locker) pick(which []bool) []Client {
	var out []Client
	for i, ok := range which {
		if ok {
			out = append(out, l.nodes[i])
		}
	}
	return out
}

// renew extends owner's hold of name on a quorum. ErrNotHeld when too many
// nodes answered that it is not owner's for a quorum to remain.
func (l *Locker) renew(ctx context.Context, name, owner string, ttl time.Duration) error {
	key := LockKey(l.prefix, name)
	fence := max(ttl, l.fenceTTL)
	res := each(ctx, l, l.timeout(ttl), func(ctx context.Context, c Client) (int, error) {
		return mutexRenewScript.Run(ctx, c, []string{key, fenceKey(key)}, owner, ttl.Milliseconds(), fence.Milliseconds()).Int()
	})
	ok, not, errs := tally(l, res, 1)
	q := quorum(len(l.nodes))
	switch {
	case ok >= q:
		return nil
	case not > len(l.nodes)-q:
		return fmt.Errorf("lock: renew %q: %w", name, ErrNotHeld)
	default:
		return fmt.Errorf("lock: renew %q: renewed on %d of %d nodes: %w", name, ok, len(l.nodes), errors.Join(errs...))
	}
}

// release undoes one acquisition by owner and says how many remain (the
// most any granting node reported).
func (l *Locker) release(ctx context.Context, name, owner string, ttl time.Duration) (int, error) {
	key := LockKey(l.prefix, name)
	res := each(ctx, l, l.timeout(ttl), func(ctx context.Context, c Client) (int, error) {
		return mutexReleaseScript.Run(ctx, c, []string{key}, owner, l.channel).Int()
	})
	left, done, not := 0, 0, 0
	var errs []error
	for i, r := range res {
		switch {
		case r.Err != nil:
			errs = append(errs, l.nodeErr(i, r.Err))
		case r.Val < 0:
			not++
		default:
			done++
			left = max(left, r.Val)
		}
	}
	q := quorum(len(l.nodes))
	switch {
	case done >= q:
		return left, nil
	case not > len(l.nodes)-q:
		return 0, fmt.Errorf("lock: unlock %q: %w", name, ErrNotHeld)
	default:
		return 0, fmt.Errorf("lock: unlock %q: released on %d of %d nodes: %w", name, done, len(l.nodes), errors.Join(errs...))
	}
}

// tally counts the nodes that answered want, those that answered something
// else, and the errors.
func tally(l *Locker, res []nodeResult[int], want int) (ok, not int, errs []error) {
	for i, r := range res {
		switch {
		case r.Err != nil:
			errs = append(errs, l.nodeErr(i, r.Err))
		case r.Val == want:
			ok++
		default:
			not++
		}
	}
	return ok, not, errs
}

// hold is one owner's hold of one lock through a Locker, shared by the
// owner's reentrant Mutexes, with exactly one watchdog goroutine.
type hold struct {
	l            *Locker
	name, owner  string
	ttl          time.Duration
	token        int64
	refs         int                     // Mutexes sharing it; under l.mu
	ctx          context.Context         // cancelled with ErrLeaseLost when lost
	cancel       context.CancelCauseFunc //
	stopWatchdog func()
	done         <-chan struct{} // closed when the watchdog has ended

	mu       sync.Mutex
	lastSent time.Time // send time of the last confirmed acquisition or renewal
	lost     bool
}

func (l *Locker) newHold(name, owner string, ttl time.Duration, token int64, sent time.Time) *hold {
	h := &hold{l: l, name: name, owner: owner, ttl: ttl, token: token, lastSent: sent}
	h.ctx, h.cancel = context.WithCancelCause(context.Background())
	h.watchdog()
	return h
}

func (h *hold) validUntil() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lastSent.Add(h.ttl - leaseMargin(h.ttl))
}

// watchdog starts the hold's keepalive, as Lease's: a timer between
// renewals, no goroutine; stopWatchdog ends it.
func (h *hold) watchdog() {
	renew := func(ctx context.Context) error { return h.l.renew(ctx, h.name, h.owner, h.ttl) }
	h.done, h.stopWatchdog = startKeepAlive(h.ttl, h.validUntil, renew, func(sent time.Time) {
		h.mu.Lock()
		h.lastSent = sent
		h.mu.Unlock()
	}, func(why error) {
		if why != nil {
			h.lose(why)
		}
	})
}

// lose marks the hold lost and cancels its Mutexes' contexts.
func (h *hold) lose(why error) {
	h.mu.Lock()
	h.lost = true
	h.mu.Unlock()
	h.l.mu.Lock()
	if h.l.holds[holdKey{h.name, h.owner}] == h {
		delete(h.l.holds, holdKey{h.name, h.owner})
	}
	h.l.mu.Unlock()
	h.cancel(fmt.Errorf("%w: lock %q: %w", ErrLeaseLost, h.name, why))
}

func (h *hold) isLost() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lost
}

// stop ends the watchdog and waits for it.
func (h *hold) stop() {
	h.stopWatchdog()
	<-h.done
}
