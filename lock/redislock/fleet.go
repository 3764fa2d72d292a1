package redislock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/lock"
)

// The fleet (lock.Fleet) on Redis.
//
// Keys (prefix "slotd"):
//
//	slotd:replica:{<replica id>}  the instance nonce of the live process with that id (TTL: Announce's)
//	slotd:fleet                   sorted set: the live replica ids → when each expires, unix ms
//	slotd:first-start             the fleet's first start, unix ms (TTL FirstStartTTL, renewed by Started)

var (
	//go:embed announce.lua
	announceLua    string
	announceScript = redis.NewScript(announceLua)
	//go:embed live.lua
	liveLua    string
	liveScript = redis.NewScript(liveLua)
)

// ReplicaKey is the presence key of replica id under prefix.
func ReplicaKey(prefix, replica string) string { return prefix + ":replica:{" + replica + "}" }

// FirstStartKey is the key of the fleet's first start under prefix.
func FirstStartKey(prefix string) string { return prefix + ":first-start" }

// Announce implements Fleet.
func (r *Store) Announce(ctx context.Context, replica, instance string, ttl time.Duration) (lock.Presence, error) {
	if ttl <= 0 {
		return lock.Presence{}, fmt.Errorf("lock: announce replica %q: TTL %v must be positive", replica, ttl)
	}
	p, err := r.announce(ctx, replica, instance, ttl.Milliseconds())
	if err != nil || !r.defers {
		return p, err
	}
	live, err := r.live(ctx, replica, ttl.Milliseconds())
	if err != nil {
		return p, err
	}
	p.Live = live
	return p, nil
}

// Withdraw implements Fleet.
func (r *Store) Withdraw(ctx context.Context, replica, instance string) error {
	p, err := r.announce(ctx, replica, instance, 0)
	if err != nil || p.Other != "" {
		return err // another live process has the id: it stays live
	}
	_, err = r.live(ctx, replica, 0)
	return err
}

// live adds replica to the fleet's live set for ttlMS (0: removes it) and
// returns the set.
func (r *Store) live(ctx context.Context, replica string, ttlMS int64) ([]string, error) {
	key := r.prefix + ":fleet"
	live, err := liveScript.Run(ctx, r.rdb, []string{key}, replica, ttlMS, r.doneCh).StringSlice()
	if err != nil {
		return nil, redisErr(fmt.Errorf("lock: live replicas (key %s): %w", key, err))
	}
	return live, nil
}

func (r *Store) announce(ctx context.Context, replica, instance string, ttlMS int64) (lock.Presence, error) {
	key := ReplicaKey(r.prefix, replica)
	res, err := announceScript.Run(ctx, r.rdb, []string{key}, instance, ttlMS).Slice()
	if err == nil && len(res) != 2 {
		err = fmt.Errorf("unexpected reply %v", res)
	}
	if err != nil {
		return lock.Presence{}, redisErr(fmt.Errorf("lock: announce replica %q (key %s): %w", replica, key, err))
	}
	other, _ := res[0].(string)
	ms, _ := res[1].(int64)
	return lock.Presence{Other: other, TTL: time.Duration(ms) * time.Millisecond}, nil
}

// Started implements Fleet.
func (r *Store) Started(ctx context.Context, now time.Time) (time.Time, error) {
	key := FirstStartKey(r.prefix)
	p := r.rdb.Pipeline()
	p.SetNX(ctx, key, now.UnixMilli(), lock.FirstStartTTL)
	p.PExpire(ctx, key, lock.FirstStartTTL)
	get := p.Get(ctx, key)
	if _, err := p.Exec(ctx); err != nil {
		return time.Time{}, redisErr(fmt.Errorf("lock: first start (key %s): %w", key, err))
	}
	return parseFirstStart(key, get.Val())
}

// FirstStart implements Fleet.
func (r *Store) FirstStart(ctx context.Context) (time.Time, error) {
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
		return time.Time{}, fmt.Errorf("lock: first start (key %s): %w: %q", key, lock.ErrForeign, v)
	}
	return time.UnixMilli(ms).UTC(), nil
}

// Announce implements Fleet on every node: another instance holding the id
// on any node that answered is reported. It fails only if no node answered.
func (r *Redlock) Announce(ctx context.Context, replica, instance string, ttl time.Duration) (lock.Presence, error) {
	res := all(ctx, r, 0, func(ctx context.Context, n *Store) (lock.Presence, error) {
		return n.Announce(ctx, replica, instance, ttl)
	})
	var out lock.Presence
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
		return lock.Presence{}, errors.Join(errs...)
	}
	return out, nil
}

// Withdraw implements Fleet on every node.
func (r *Redlock) Withdraw(ctx context.Context, replica, instance string) error {
	res := all(ctx, r, 0, func(ctx context.Context, n *Store) (struct{}, error) {
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
	return r.earliest(ctx, func(ctx context.Context, n *Store) (time.Time, error) { return n.Started(ctx, now) })
}

// FirstStart implements Fleet on every node; the earliest record wins.
func (r *Redlock) FirstStart(ctx context.Context) (time.Time, error) {
	return r.earliest(ctx, func(ctx context.Context, n *Store) (time.Time, error) { return n.FirstStart(ctx) })
}

// earliest is the earliest non-zero time op reads on the nodes; it fails
// only if no node answered.
func (r *Redlock) earliest(ctx context.Context, op func(context.Context, *Store) (time.Time, error)) (time.Time, error) {
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
func (r *Store) OnFleetChange(f func()) (stop func()) {
	stop = r.sub.OnFleet(f)
	r.sub.Start()
	return stop
}

// OnFleetChange implements Fleet: a Redlock has no live set (see
// Presence.Live), so f is never called.
func (r *Redlock) OnFleetChange(func()) (stop func()) { return func() {} }
