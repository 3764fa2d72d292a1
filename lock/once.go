package lock

import (
	"context"
	"time"
)

// Oncer is a store that keeps one-time markers on slots, so that of all
// the replicas that see one event of a slot (it ended exhausted, or
// missed), exactly one acts on it: the one whose Once call set the
// marker. Every slotd store implements it (etcd and ZooKeeper over
// lock/internal/kv); it is optional, and a store without it leaves such
// events to no replica (the scheduler counts them as unsupported).
type Oncer interface {
	// Once sets slot's marker for event, holding value, for ttl, unless
	// it is set; it reports whether this call set it. An error means the
	// answer is unknown: the caller must not act (at most once, not at
	// least once).
	Once(ctx context.Context, slot Slot, event, value string, ttl time.Duration) (bool, error)
}
