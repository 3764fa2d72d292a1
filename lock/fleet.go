package lock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed announce.lua
	announceLua    string
	announceScript = redis.NewScript(announceLua)
	//go:embed live.lua
	liveLua    string
	liveScript = redis.NewScript(liveLua)
)

// Fleet is what a shared store knows about the replicas that share it:
// which process instance holds each replica id, and when the fleet first
// started. Redis and Redlock implement it; Memory, one process's own store,
// does not (there is no fleet to know about).
//
// Keys (prefix "slotd"):
//
//	slotd:replica:{<replica id>}  the instance nonce of the live process with that id (TTL: Announce's)
//	slotd:fleet                   sorted set: the live replica ids → when each expires, unix ms
//	slotd:first-start             the fleet's first start, unix ms (TTL FirstStartTTL, renewed by Started)
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
	// set (Redlock) never calls f.
	OnFleetChange(f func()) (stop func())
}

// Presence is the answer to Fleet.Announce.
type Presence struct {
	Other string        // "": the caller holds the id; else the instance that does
	TTL   time.Duration // how long the holder's claim lasts without renewal
	// Live lists the replica ids announced and not expired or withdrawn,
	// the caller's included, in no particular order — on a store that
	// sends Taken notices (Redis, unless WithMinReplicasAck; it starts
	// sending them with its first Announce), so that a replica may leave a
	// slot to its preferred claimant among them. nil on any other store
	// (Redlock).
	Live []string
}

// FirstStartTTL is the first-start record's TTL. Every replica renews it
// at each clock check, so it expires only when the whole fleet has been
// down this long; the next start then counts as a new fleet's first.
const FirstStartTTL = 400 * 24 * time.Hour

// ReplicaKey is the presence key of replica id under prefix.
func ReplicaKey(prefix, replica string) string { return prefix + ":replica:{" + replica + "}" }

// FirstStartKey is the key of the fleet's first start under prefix.
func FirstStartKey(prefix string) string { return prefix + ":first-start" }

// Announce implements Fleet.
func (r *Redis) Announce(ctx context.Context, replica, instance string, ttl time.Duration) (Presence, error) {
	if ttl <= 0 {
		return Presence{}, fmt.Errorf("lock: announce replica %q: TTL %v must be positive", replica, ttl)
	}
	p, err := r.announce(ctx, replica, instance, ttl.Milliseconds())
	if err != nil || r.batch.takenCh == "" {
		return p, err
	}
	r.batch.announcing.Store(true)
	live, err := r.live(ctx, replica, ttl.Milliseconds())
	if err != nil {
		return p, err
	}
	p.Live = live
	return p, nil
}

// Withdraw implements Fleet.
func (r *Redis) Withdraw(ctx context.Context, replica, instance string) error {
	p, err := r.announce(ctx, replica, instance, 0)
	if err != nil || p.Other != "" {
		return err // another live process has the id: it stays live
	}
	_, err = r.live(ctx, replica, 0)
	return err
}

// live adds replica to the fleet's live set for ttlMS (0: removes it) and
// returns the set.
func (r *Redis) live(ctx context.Context, replica string, ttlMS int64) ([]string, error) {
	key := r.prefix + ":fleet"
	live, err := liveScript.Run(ctx, r.rdb, []string{key}, replica, ttlMS, r.doneCh).StringSlice()
	if err != nil {
		return nil, redisErr(fmt.Errorf("lock: live replicas (key %s): %w", key, err))
	}
	return live, nil
}

func (r *Redis) announce(ctx context.Context, replica, instance string, ttlMS int64) (Presence, error) {
	key := ReplicaKey(r.prefix, replica)
	res, err := announceScript.Run(ctx, r.rdb, []string{key}, instance, ttlMS).Slice()
	if err == nil && len(res) != 2 {
		err = fmt.Errorf("unexpected reply %v", res)
	}
	if err != nil {
		return Presence{}, redisErr(fmt.Errorf("lock: announce replica %q (key %s): %w", replica, key, err))
	}
	other, _ := res[0].(string)
	ms, _ := res[1].(int64)
	return Presence{Other: other, TTL: time.Duration(ms) * time.Millisecond}, nil
}

// Started implements Fleet.
func (r *Redis) Started(ctx context.Context, now time.Time) (time.Time, error) {
	key := FirstStartKey(r.prefix)
	p := r.rdb.Pipeline()
	p.SetNX(ctx, key, now.UnixMilli(), FirstStartTTL)
	p.PExpire(ctx, key, FirstStartTTL)
	get := p.Get(ctx, key)
	if _, err := p.Exec(ctx); err != nil {
		return time.Time{}, redisErr(fmt.Errorf("lock: first start (key %s): %w", key, err))
	}
	return parseFirstStart(key, get.Val())
}

// FirstStart implements Fleet.
func (r *Redis) FirstStart(ctx context.Context) (time.Time, error) {
	key := FirstStartKey(r.prefix)
	p := r.rdb.Pipeline()
	get := p.Get(ctx, key)
	if _, err := p.Exec(ctx); errors.Is(err, redis.Nil) {
		return time.Time{}, nil
	} else if err != nil {
		return time.Time{}, redisErr(fmt.Errorf("lock: first start (key %s): %w", key, err))
	}
	return parseFirstStart(key, get.Val())
}

func parseFirstStart(key, v string) (time.Time, error) {
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms <= 0 {
		return time.Time{}, fmt.Errorf("lock: first start (key %s): %w: %q", key, ErrForeign, v)
	}
	return time.UnixMilli(ms).UTC(), nil
}

// Announce implements Fleet on every node: another instance holding the id
// on any node that answered is reported. It fails only if no node answered.
func (r *Redlock) Announce(ctx context.Context, replica, instance string, ttl time.Duration) (Presence, error) {
	res := all(ctx, r, 0, func(ctx context.Context, n *Redis) (Presence, error) {
		return n.Announce(ctx, replica, instance, ttl)
	})
	var out Presence
	var errs []error
	answered := 0
	for i, nr := range res {
		switch {
		case nr.Err != nil:
			errs = append(errs, fmt.Errorf("node %d: %w", i, nr.Err))
		case nr.Val.Other != "" && out.Other == "":
			answered++
			out = nr.Val
		default:
			answered++
			if out.Other == "" {
				out.TTL = max(out.TTL, nr.Val.TTL)
			}
		}
	}
	if answered == 0 {
		return Presence{}, errors.Join(errs...)
	}
	return out, nil
}

// Withdraw implements Fleet on every node.
func (r *Redlock) Withdraw(ctx context.Context, replica, instance string) error {
	res := all(ctx, r, 0, func(ctx context.Context, n *Redis) (struct{}, error) {
		return struct{}{}, n.Withdraw(ctx, replica, instance)
	})
	var errs []error
	for i, nr := range res {
		if nr.Err != nil {
			errs = append(errs, fmt.Errorf("node %d: %w", i, nr.Err))
		}
	}
	return errors.Join(errs...)
}

// Started implements Fleet on every node; the earliest record wins.
func (r *Redlock) Started(ctx context.Context, now time.Time) (time.Time, error) {
	return r.earliest(ctx, func(ctx context.Context, n *Redis) (time.Time, error) { return n.Started(ctx, now) })
}

// FirstStart implements Fleet on every node; the earliest record wins.
func (r *Redlock) FirstStart(ctx context.Context) (time.Time, error) {
	return r.earliest(ctx, func(ctx context.Context, n *Redis) (time.Time, error) { return n.FirstStart(ctx) })
}

// earliest is the earliest non-zero time op reads on the nodes; it fails
// only if no node answered.
func (r *Redlock) earliest(ctx context.Context, op func(context.Context, *Redis) (time.Time, error)) (time.Time, error) {
	res := all(ctx, r, 0, op)
	var out time.Time
	var errs []error
	answered := 0
	for i, nr := range res {
		if nr.Err != nil {
			errs = append(errs, fmt.Errorf("node %d: %w", i, nr.Err))
			continue
		}
		answered++
		if !nr.Val.IsZero() && (out.IsZero() || nr.Val.Before(out)) {
			out = nr.Val
		}
	}
	if answered == 0 {
		return time.Time{}, errors.Join(errs...)
	}
	return out, nil
}

// OnFleetChange implements Fleet: live.lua publishes "fleet" on the done
// channel when the live set's members change.
func (r *Redis) OnFleetChange(f func()) (stop func()) {
	stop = r.sub.onFleet(f)
	r.sub.start()
	return stop
}

// OnFleetChange implements Fleet: a Redlock has no live set (see
// Presence.Live), so f is never called.
func (r *Redlock) OnFleetChange(func()) (stop func()) { return func() {} }
