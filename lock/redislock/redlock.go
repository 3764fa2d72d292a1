package redislock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/internal/quorum"
)

var (
	//go:embed redlock_align.lua
	redlockAlignLua    string
	redlockAlignScript = redis.NewScript(redlockAlignLua)
	//go:embed redlock_unclaim.lua
	redlockUnclaimLua    string
	redlockUnclaimScript = redis.NewScript(redlockUnclaimLua)
)

// ErrNoQuorum: the nodes of a Redlock store did not agree, a quorum of them
// on one answer, or too few answered. The outcome is unknown: the caller
// must not run the task, and should wait a random delay before it tries
// again, so that contenders that split the vote do not collide again.
var ErrNoQuorum = errors.New("lock: no quorum")

// DefaultNodeTimeout bounds each call to each node of a Redlock store
// that has no lease to scale with (complete, release, state, time, rerun);
// claims and renewals are bounded by a tenth of the lease.
const DefaultNodeTimeout = 2 * time.Second

// Redlock is the slot protocol on N independent Redis masters (Redlock):
// every operation runs the single-server scripts on all nodes in parallel,
// each call bounded by a per-node timeout, and succeeds when a quorum of
// N/2+1 nodes agrees. A claim is won when a quorum granted it within its
// validity (lease − elapsed − drift; drift = lease/100 + 2ms), and a Lease
// on it is held against no more than that validity.
//
// Every node keeps its own attempts counter. A claim's attempt is the
// highest a winner counted, and the winners whose counters were behind (a
// node was down, or came back empty) are renumbered to it before the claim
// counts as won, so the owner value is the same on every node; since two
// quorums share a node, the next claim counts past it and fencing tokens
// never repeat — as long as no node forgets what it acknowledged. A node
// that restarts empty must stay down longer than the longest done TTL, or
// run with appendfsync always: otherwise it can, with nodes that missed
// the writes it forgot, form a quorum that lets a done slot run again or
// hand out an attempt number again.
type Redlock struct {
	nodes   []*Store
	timeout time.Duration // 0: lease/10 for claims and renewals, DefaultNodeTimeout otherwise
	redlockControls
}

// RedlockOption configures a Redlock store.
type RedlockOption func(*Redlock)

// WithNodeTimeout bounds every call to each node (default: a tenth
// of the lease for claims and renewals, DefaultNodeTimeout for the
// rest). Redlock wants it small against the lease, so that a dead node
// costs a claim little of its validity.
func WithNodeTimeout(d time.Duration) RedlockOption {
	return func(r *Redlock) { r.timeout = d }
}

// NewRedlock returns the slot protocol on nodes, independent masters (not
// replicas of one another, nor a Cluster), with keys under prefix. It does
// no I/O; Close stops the pub/sub subscriptions Watch starts. Each client
// must be built with ContextTimeoutEnabled, as for NewRedis. It is an error
// to pass no nodes or a nil one.
func NewRedlock(nodes []Client, prefix string, opts ...RedlockOption) (*Redlock, error) {
	if len(nodes) == 0 {
		return nil, errors.New("lock: redlock store: no nodes")
	}
	r := &Redlock{}
	for i, c := range nodes {
		if c == nil {
			return nil, fmt.Errorf("lock: redlock store: node %d is nil", i)
		}
		n := New(c, prefix)
		n.defers = false // Redlock has no preferred claimant: no live set
		r.nodes = append(r.nodes, n)
	}
	for _, o := range opts {
		o(r)
	}
	return r, nil
}

// nodeTimeout is the bound of one call to one node; lease is 0 for calls
// that do not take one.
func (r *Redlock) nodeTimeout(lease time.Duration) time.Duration {
	switch {
	case r.timeout > 0:
		return r.timeout
	case lease > 0:
		return max(lease/10, time.Millisecond)
	}
	return DefaultNodeTimeout
}

func (r *Redlock) quorum() int { return quorum.Of(len(r.nodes)) }

// all runs op on every node in parallel.
func all[T any](ctx context.Context, r *Redlock, lease time.Duration, op func(context.Context, *Store) (T, error)) []quorum.Result[T] {
	return quorum.FanOut(ctx, r.nodes, r.nodeTimeout(lease), op)
}

// read runs op on every node in parallel until a quorum has answered (or
// so many failed that none can): reads need no more, and a stalled node
// would otherwise cost each one the node timeout. The nodes not waited for
// read as errors.
func read[T any](ctx context.Context, r *Redlock, op func(context.Context, *Store) (T, error)) []quorum.Result[T] {
	q := r.quorum()
	return quorum.FanOutUntil(ctx, r.nodes, r.nodeTimeout(0), op, func(res []quorum.Result[T], answered []bool) bool {
		ok, failed := tally(res, answered)
		return ok >= q || failed > len(r.nodes)-q
	})
}

// tally counts the answered nodes of a fan-out that succeeded and failed.
func tally[T any](res []quorum.Result[T], answered []bool) (ok, failed int) {
	for i, a := range answered {
		switch {
		case !a:
		case res[i].Err == nil:
			ok++
		default:
			failed++
		}
	}
	return ok, failed
}

// owned runs one of the owner-checked operations on every node: nil when a
// quorum confirmed it, an error wrapping ErrNotHeld when so many nodes said
// not held that no quorum can confirm it, and another error otherwise.
func (r *Redlock) owned(ctx context.Context, op string, slot lock.Slot, owner lock.Owner, lease time.Duration, f func(context.Context, *Store) error) error {
	res := all(ctx, r, lease, func(ctx context.Context, n *Store) (struct{}, error) {
		return struct{}{}, f(ctx, n)
	})
	ok, not := 0, 0
	var errs []error
	for i, nr := range res {
		switch {
		case nr.Err == nil:
			ok++
		case errors.Is(nr.Err, lock.ErrNotHeld):
			not++
		default:
			errs = append(errs, fmt.Errorf("node %d: %w", i, nr.Err))
		}
	}
	q := r.quorum()
	switch {
	case ok >= q:
		return nil
	case not > len(r.nodes)-q:
		return fmt.Errorf("lock: %s %s attempt %d: %d of %d nodes: %w", op, slot, owner.Attempt, not, len(r.nodes), lock.ErrNotHeld)
	}
	return fmt.Errorf("lock: %s %s attempt %d: confirmed by %d of %d nodes, %d needed: %w: %w",
		op, slot, owner.Attempt, ok, len(r.nodes), q, ErrNoQuorum, errors.Join(errs...))
}

// Renew implements Store: on a quorum, each node bounded by a tenth of the
// lease.
func (r *Redlock) Renew(ctx context.Context, slot lock.Slot, owner lock.Owner, lease time.Duration) error {
	return r.owned(ctx, "renew", slot, owner, lease, func(ctx context.Context, n *Store) error {
		return n.Renew(ctx, slot, owner, lease)
	})
}

// Complete implements Store: done on a quorum.
func (r *Redlock) Complete(ctx context.Context, slot lock.Slot, owner lock.Owner, doneTTL time.Duration) error {
	return r.owned(ctx, "complete", slot, owner, 0, func(ctx context.Context, n *Store) error {
		return n.Complete(ctx, slot, owner, doneTTL)
	})
}

// Release implements Store: freed on a quorum; every node that frees it
// publishes the release.
func (r *Redlock) Release(ctx context.Context, slot lock.Slot, owner lock.Owner) error {
	return r.ReleaseAfter(ctx, slot, owner, 0)
}

// ReleaseAfter implements lock.Store: the backoff is written on a
// quorum, each node counting it from its own clock, so that a quorum of
// claims answers early until it ends.
func (r *Redlock) ReleaseAfter(ctx context.Context, slot lock.Slot, owner lock.Owner, delay time.Duration) error {
	return r.owned(ctx, "release", slot, owner, 0, func(ctx context.Context, n *Store) error {
		return n.ReleaseAfter(ctx, slot, owner, delay)
	})
}

// Watch implements Store: one subscription per node (each started by the
// first Watch), and a release heard from any node wakes the watcher.
func (r *Redlock) Watch(slot lock.Slot) *lock.Watch {
	subs := make([]*lock.Watch, len(r.nodes))
	w := lock.NewWatch(func() {
		for _, s := range subs {
			s.Stop()
		}
	})
	for i, n := range r.nodes {
		subs[i] = n.watchInto(slot, w)
	}
	return w
}

// Subscribe starts every node's release subscription and waits until a
// quorum of them has confirmed it (see Redis.Subscribe); go-redis keeps
// trying the others.
func (r *Redlock) Subscribe(ctx context.Context) error {
	res := all(ctx, r, 0, func(ctx context.Context, n *Store) (struct{}, error) {
		return struct{}{}, n.Subscribe(ctx)
	})
	ok := 0
	var errs []error
	for i, nr := range res {
		if nr.Err == nil {
			ok++
		} else {
			errs = append(errs, fmt.Errorf("node %d: %w", i, nr.Err))
		}
	}
	if ok < r.quorum() {
		return fmt.Errorf("lock: subscribe: %d of %d nodes: %w: %w", ok, len(r.nodes), ErrNoQuorum, errors.Join(errs...))
	}
	return nil
}

// Close stops every node's subscription and waits for its goroutine. It
// does not close the go-redis clients, which the caller owns.
func (r *Redlock) Close() error {
	var errs []error
	for _, n := range r.nodes {
		errs = append(errs, n.Close())
	}
	return errors.Join(errs...)
}

// States implements Store: each slot as most of the first quorum of nodes
// to answer see it (the value a majority of them hold, or else the most
// common one), with the highest attempts count any of them has.
func (r *Redlock) States(ctx context.Context, slots []lock.Slot) ([]lock.State, error) {
	res := read(ctx, r, func(ctx context.Context, n *Store) ([]lock.State, error) {
		sts, err := n.States(ctx, slots)
		if sts == nil {
			return nil, err
		}
		return sts, nil // a foreign value is reported below, once
	})
	var answered [][]lock.State
	var errs []error
	for i, nr := range res {
		if nr.Err != nil {
			errs = append(errs, fmt.Errorf("node %d: %w", i, nr.Err))
			continue
		}
		answered = append(answered, nr.Val)
	}
	if len(answered) < r.quorum() {
		return nil, fmt.Errorf("lock: state of %d slots: %d of %d nodes answered: %w: %w",
			len(slots), len(answered), len(r.nodes), ErrNoQuorum, errors.Join(errs...))
	}
	out := make([]lock.State, len(slots))
	var ferrs []error
	for i := range slots {
		votes := map[string]int{}
		attempts := 0
		for _, sts := range answered {
			votes[sts[i].Value]++
			attempts = max(attempts, sts[i].Attempts)
		}
		best := ""
		for v, n := range votes {
			if n > votes[best] || (n == votes[best] && v > best) {
				best = v
			}
		}
		for _, sts := range answered {
			if sts[i].Value == best {
				out[i] = sts[i]
				break
			}
		}
		out[i].Attempts = attempts
		if out[i].Status == "foreign" {
			ferrs = append(ferrs, fmt.Errorf("lock: state %s: %w: %q", slots[i], lock.ErrForeign, best))
		}
	}
	return out, errors.Join(ferrs...)
}

// Time implements Store: the median of the clocks of the first quorum of
// nodes to answer.
func (r *Redlock) Time(ctx context.Context) (time.Time, error) {
	res := read(ctx, r, func(ctx context.Context, n *Store) (time.Time, error) { return n.Time(ctx) })
	var ts []time.Time
	var errs []error
	for i, nr := range res {
		if nr.Err != nil {
			errs = append(errs, fmt.Errorf("node %d: %w", i, nr.Err))
			continue
		}
		ts = append(ts, nr.Val)
	}
	if len(ts) < r.quorum() {
		return time.Time{}, fmt.Errorf("lock: time: %d of %d nodes answered: %w: %w", len(ts), len(r.nodes), ErrNoQuorum, errors.Join(errs...))
	}
	return median(ts), nil
}

// Rerun implements Store: the rerun script on every node. Cleared when a
// quorum cleared it (Attempts: the highest count, Woken: summed over the
// nodes); refused when a quorum refused it; otherwise an error wrapping
// ErrNoQuorum. A node that cleared while the quorum refused stays cleared:
// without a quorum that is no grant.
func (r *Redlock) Rerun(ctx context.Context, slot lock.Slot, force bool) (lock.Rerun, error) {
	res := all(ctx, r, 0, func(ctx context.Context, n *Store) (lock.Rerun, error) { return n.Rerun(ctx, slot, force) })
	var cleared, refused lock.Rerun
	nc, nr := 0, 0
	var errs []error
	for i, x := range res {
		switch {
		case x.Err != nil:
			errs = append(errs, fmt.Errorf("node %d: %w", i, x.Err))
		case x.Val.Cleared:
			nc++
			cleared.Cleared = true
			cleared.Woken += x.Val.Woken
			cleared.Attempts = max(cleared.Attempts, x.Val.Attempts)
			if cleared.Previous == "" {
				cleared.Previous = x.Val.Previous
			}
		default:
			nr++
			if refused.Refused == "" || x.Val.Refused == "running" {
				refused.Refused, refused.Previous, refused.TTL = x.Val.Refused, x.Val.Previous, x.Val.TTL
			}
			refused.Attempts = max(refused.Attempts, x.Val.Attempts)
		}
	}
	q := r.quorum()
	switch {
	case nc >= q:
		return cleared, nil
	case nr >= q:
		return refused, nil
	}
	return lock.Rerun{}, fmt.Errorf("lock: rerun %s: cleared on %d, refused on %d of %d nodes: %w: %w",
		slot, nc, nr, len(r.nodes), ErrNoQuorum, errors.Join(errs...))
}

// LeaseMargin is how much of a lease a lock.Lease on a Redlock claim gives
// up at least (see lock.Hold): the drift allowance, so that the lease is
// held against no more than the claim's validity.
func (r *Redlock) LeaseMargin(lease time.Duration) time.Duration { return quorum.Drift(lease) }
