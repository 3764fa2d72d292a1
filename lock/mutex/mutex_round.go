package mutex

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/internal/quorum"
	"github.com/slotd/slotd/retry"
)

// One round of each lock script on every node of a Locker, and the quorum
// arithmetic that turns the nodes' answers into one outcome.

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

// each runs op on every node, in parallel when there are several.
func each[T any](ctx context.Context, l *Locker, timeout time.Duration, op func(context.Context, Client) (T, error)) []quorum.Result[T] {
	if len(l.nodes) == 1 {
		c, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		v, err := op(c, l.nodes[0])
		return []quorum.Result[T]{{Val: v, Err: err}}
	}
	return quorum.FanOut(ctx, l.nodes, timeout, op)
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
	key := lockKey(l.prefix, name)
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
			errs = append(errs, l.nodeErr(i, fmt.Errorf("%w: key %s is not a lock hash", lock.ErrForeign, key)))
		default:
			errs = append(errs, l.nodeErr(i, fmt.Errorf("unexpected reply %q", r.Val.kind)))
		}
	}
	q := quorum.Of(len(l.nodes))
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
		quorum.FanOut(uctx, l.pick(undo), l.timeout(ttl), func(ctx context.Context, c Client) (int, error) {
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
	key := lockKey(l.prefix, name)
	fence := max(ttl, l.fenceTTL)
	res := each(ctx, l, l.timeout(ttl), func(ctx context.Context, c Client) (int, error) {
		return mutexRenewScript.Run(ctx, c, []string{key, fenceKey(key)}, owner, ttl.Milliseconds(), fence.Milliseconds()).Int()
	})
	ok, not, errs := tally(l, res, 1)
	q := quorum.Of(len(l.nodes))
	switch {
	case ok >= q:
		return nil
	case not > len(l.nodes)-q:
		return fmt.Errorf("lock: renew %q: %w", name, lock.ErrNotHeld)
	default:
		return fmt.Errorf("lock: renew %q: renewed on %d of %d nodes: %w", name, ok, len(l.nodes), errors.Join(errs...))
	}
}

// release undoes one acquisition by owner and says how many remain (the
// most any granting node reported).
func (l *Locker) release(ctx context.Context, name, owner string, ttl time.Duration) (int, error) {
	key := lockKey(l.prefix, name)
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
	q := quorum.Of(len(l.nodes))
	switch {
	case done >= q:
		return left, nil
	case not > len(l.nodes)-q:
		return 0, fmt.Errorf("lock: unlock %q: %w", name, lock.ErrNotHeld)
	default:
		return 0, fmt.Errorf("lock: unlock %q: released on %d of %d nodes: %w", name, done, len(l.nodes), errors.Join(errs...))
	}
}

// tally counts the nodes that answered want, those that answered something
// else, and the errors.
func tally(l *Locker, res []quorum.Result[int], want int) (ok, not int, errs []error) {
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
