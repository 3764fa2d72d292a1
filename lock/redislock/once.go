package redislock

import (
	"context"
	"fmt"
	"time"

	"github.com/slotd/slotd/lock"
)

// One-time markers (lock.Oncer) on Redis.
//
// Key (prefix "slotd"; the slot's hash tag, so it lives on the slot's
// shard):
//
//	slotd:{<task>:<slot id>}:once:<event>  value: who set it (TTL: Once's)

// Once implements Oncer with one SET NX PX, the marker's whole life.
func (r *Store) Once(ctx context.Context, slot lock.Slot, event, value string, ttl time.Duration) (bool, error) {
	if ttl <= 0 {
		return false, fmt.Errorf("lock: once %s %s: TTL %v must be positive", slot, event, ttl)
	}
	pipe := r.rdb.Pipeline()
	set := pipe.SetNX(ctx, OnceKey(r.prefix, slot, event), value, ttl)
	if _, err := pipe.Exec(ctx); err != nil {
		return false, redisErr(fmt.Errorf("lock: once %s %s: %w", slot, event, err))
	}
	return set.Val(), nil
}

// Once implements Oncer: the marker is set when a quorum of nodes set it.
// Two callers can never both reach a quorum; on a split (no caller has
// one) no caller acts, and when too few nodes answer to tell, the answer
// is ErrNoQuorum.
func (r *Redlock) Once(ctx context.Context, slot lock.Slot, event, value string, ttl time.Duration) (bool, error) {
	res := all(ctx, r, 0, func(ctx context.Context, n *Store) (bool, error) { return n.Once(ctx, slot, event, value, ttl) })
	set, notSet := 0, 0
	for _, x := range res {
		switch {
		case x.Err != nil:
		case x.Val:
			set++
		default:
			notSet++
		}
	}
	q := r.quorum()
	switch {
	case set >= q:
		return true, nil
	case notSet > len(r.nodes)-q:
		return false, nil
	}
	return false, fmt.Errorf("lock: once %s %s: %w (%d of %d nodes set it, %d did not)", slot, event, ErrNoQuorum, set, len(r.nodes), notSet)
}
