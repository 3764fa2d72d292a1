// Package mutex is a general-purpose lock on Redis, for any resource a
// task plugin names, built of the slot protocol's machinery: TryLock; Lock,
// woken by pub/sub; reentrancy by an owner id carried in the context; a
// watchdog that cancels the holder's context before the lease can run out;
// fencing tokens; and Do, which runs a function under the lock. On one
// server, Sentinel, Cluster, or a Redlock quorum of independent servers
// (NewRedlockLocker). slotd's engine does not use it.
//
// Keys (prefix "slotd"; the braces are a Redis Cluster hash tag, so that one
// lock's two keys share a shard and one script can touch both):
//
//	slotd:lock:{<name>}        hash: owner, count (reentrant acquisitions), token; TTL the lock's ttl
//	slotd:lock:{<name>}:fence  fencing counter; TTL max(ttl, fence TTL), refreshed by every acquire and renew
//	slotd:lock:released        pub/sub channel; message = lock key
package mutex

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/internal/quorum"
	"github.com/slotd/slotd/lock/internal/redisx"
)

// Client is the part of go-redis that a Locker needs; a *redis.Client,
// *redis.ClusterClient or sentinel failover client all satisfy it.
type Client = redisx.Client

// leaseMargin is how long before a lock's lease could run out its holder
// gives it up: a tenth of the lease, and never less than Redlock's drift,
// so that on a quorum the lock is held against at most its validity.
func leaseMargin(ttl time.Duration) time.Duration { return max(ttl/10, quorum.Drift(ttl)) }

// gone: a renewal found the lock someone else's.
func gone(err error) bool { return errors.Is(err, lock.ErrNotHeld) }

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

	sub *redisx.Subscription // wakes Lock's waiters; started by the first Lock that waits

	mu    sync.Mutex
	holds map[holdKey]*hold // one watchdog per (name, owner) held through this Locker

	// waiting and woken, when set, tell tests that a Lock call went to sleep
	// and why it woke (by a pub/sub message or by its timer).
	waiting func(name string)
	woken   func(name string, byMessage bool)
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
	l.sub = &redisx.Subscription{Clients: nodes, Channels: []string{l.channel}, Timeout: l.timeout(DefaultTTL), Owner: "locker"}
	return l
}

// lockKey returns the Redis key of the lock name under prefix.
func lockKey(prefix, name string) string { return prefix + ":lock:{" + name + "}" }

func fenceKey(lockKey string) string { return lockKey + ":fence" }

// Close stops the pub/sub subscriptions and the watchdogs of the locks still
// held through l, whose Mutex contexts are cancelled with ErrLeaseLost (the
// locks expire within their ttl), and waits for their goroutines. It does
// not close the go-redis clients, which the caller owns.
func (l *Locker) Close() error {
	l.mu.Lock()
	holds := make([]*hold, 0, len(l.holds))
	for k, h := range l.holds {
		holds = append(holds, h)
		delete(l.holds, k)
	}
	l.mu.Unlock()
	for _, h := range holds {
		h.Stop()
		h.Lose(errors.New("locker closed"))
	}
	return l.sub.Close()
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
