package lock

import (
	"context"
	"time"
)

// Fleet is what a shared store knows about the replicas that share it:
// which process instance holds each replica id, and when the fleet first
// started. Every store implements it: Redis and Redlock with their own
// scripts, etcd, ZooKeeper and Memory over one primitive (lock/internal/kv).
// Memory's fleet is its one process: it records the first start and the
// id's presence, and has no live set.
type Fleet interface {
	// Announce claims replica for the process instance (a nonce of its
	// own) for ttl, or renews its claim. If another instance holds the id,
	// nothing changes and the answer names it, with its remaining TTL.
	Announce(ctx context.Context, replica, instance string, ttl time.Duration) (Presence, error)
	// Withdraw gives the id up, if instance still holds it, so that a
	// restart need not wait for the TTL.
	Withdraw(ctx context.Context, replica, instance string) error
	// Started records now as the fleet's first start unless one is
	// recorded, renews the record's TTL, and returns the recorded time.
	Started(ctx context.Context, now time.Time) (time.Time, error)
	// FirstStart reads the fleet's first start; zero if none is recorded.
	// It writes nothing.
	FirstStart(ctx context.Context) (time.Time, error)
	// OnFleetChange calls f each time the set of live replica ids
	// (Presence.Live) changes — a replica announced for the first time,
	// withdrew, or was found expired by anyone's Announce — so that the
	// caller can Announce again and read the new set at once, not at its
	// next periodic Announce. A hint, like Watch's: a notice lost is seen
	// at that next Announce. f runs on the store's notification goroutine
	// and must return quickly. stop ends the calls. A store without a live
	// set (Redlock, Memory) never calls f.
	OnFleetChange(f func()) (stop func())
}

// Presence is the answer to Fleet.Announce.
type Presence struct {
	Other string        // "": the caller holds the id; else the instance that does
	TTL   time.Duration // how long the holder's claim lasts without renewal
	// Live lists the replica ids announced and not expired or withdrawn,
	// the caller's included, in no particular order — on a store whose
	// replicas defer to a preferred claimant (Redis, unless
	// WithMinReplicasAck; etcd; ZooKeeper), so that a replica may leave a
	// slot to its preferred claimant among them. nil on any other store
	// (Redlock, Memory).
	Live []string
}
