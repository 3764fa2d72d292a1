package lock

import (
	"context"
	"fmt"
	"time"
)

// Oncer is a store that keeps one-time markers on slots, so that of all
// the replicas that see one event of a slot (it ended exhausted, or
// missed), exactly one acts on it: the one whose Once call set the
// marker. Redis, Redlock and Memory implement it; it is optional, and a
// store without it leaves such events to no replica (the scheduler counts
// them as unsupported).
//
// Key (prefix "slotd"; the slot's hash tag, so it lives on the slot's
// shard):
//
//	slotd:{<task>:<slot id>}:once:<event>  value: who set it (TTL: Once's)
type Oncer interface {
	// Once sets slot's marker for event, holding value, for ttl, unless
	// it is set; it reports whether this call set it. An error means the
	// answer is unknown: the caller must not act (at most once, not at
	// least once).
	Once(ctx context.Context, slot Slot, event, value string, ttl time.Duration) (bool, error)
}

// OnceKey is the key of slot's marker for event under prefix.
func OnceKey(prefix string, slot Slot, event string) string {
	state, _ := Keys(prefix, slot)
	return state + ":once:" + event
}

// Once implements Oncer with one SET NX PX, the marker's whole life.
func (r *Redis) Once(ctx context.Context, slot Slot, event, value string, ttl time.Duration) (bool, error) {
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
func (r *Redlock) Once(ctx context.Context, slot Slot, event, value string, ttl time.Duration) (bool, error) {
	res := all(ctx, r, 0, func(ctx context.Context, n *Redis) (bool, error) { return n.Once(ctx, slot, event, value, ttl) })
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

// Once implements Oncer.
func (m *Memory) Once(ctx context.Context, slot Slot, event, value string, ttl time.Duration) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("lock: once %s %s: %w", slot, event, err)
	}
	if ttl <= 0 {
		return false, fmt.Errorf("lock: once %s %s: TTL %v must be positive", slot, event, ttl)
	}
	key := OnceKey("slotd", slot, event)
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if _, ok := m.get(key, now); ok {
		return false, nil
	}
	m.set(key, value, ttl, now)
	return true, nil
}
