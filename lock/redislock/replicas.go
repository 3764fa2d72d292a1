package redislock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/lock"
)

// ErrNotReplicated: fewer replicas than WithMinReplicasAck asks for
// acknowledged a write within the wait. A claim that was won is released
// again (the caller does not run the task); a complete has written its
// done marker, which a failover before the replicas catch up could lose.
var ErrNotReplicated = errors.New("lock: write not acknowledged by enough replicas")

// Option configures a Redis store.
type Option func(*Store)

// replicasAck is WithMinReplicasAck's setting.
type replicasAck struct {
	n       int
	timeout time.Duration
}

// WithMinReplicasAck makes every won claim and every complete wait (Redis
// WAIT) until n replicas of the master that took the write have
// acknowledged it, for at most timeout (and, for a claim, at most a quarter
// of the lease and half of what is left of the call's deadline). It narrows
// the window in which a failover to a replica that had not yet received
// the claim lets a second replica win the same slot.
//
// A won claim that is not acknowledged in time is released (which wakes the
// watchers, as after a failed attempt) and Claim returns an error wrapping
// ErrNotReplicated: fail closed, as for any claim whose outcome is not
// certain. The attempt it used stays counted, so while fewer than n
// replicas answer, each claim of a slot spends one of its attempts and the
// slot may end exhausted; nothing runs on a write the replicas do not have.
// A complete that is not acknowledged has still marked the slot done on the
// master; Complete returns an error wrapping ErrNotReplicated so that the
// caller can say so.
//
// WAIT does not make Redis strongly consistent: Sentinel may still promote
// a replica that had not acknowledged, and a master that loses its data on
// restart loses what its replicas had not copied. It narrows the window; it
// does not close it. Fencing tokens remain the defence against the rerun a
// lost write can cause.
//
// WAIT must run on the connection that wrote: the store takes one
// connection from a *redis.Client (also the Sentinel failover client) with
// Conn, or, on a *redis.ClusterClient, from the client of the master that
// owns the slot's hash tag (MasterForKey), runs the script, and only when
// the script wrote sends WAIT on the same connection. Other clients get an
// error from Claim and Complete.
func WithMinReplicasAck(n int, timeout time.Duration) Option {
	return func(r *Store) {
		r.ack = replicasAck{n: n, timeout: max(timeout, time.Millisecond)}
	}
}

// The clients WithMinReplicasAck can pin a connection on.
type (
	connClient interface{ Conn() *redis.Conn }
	// MasterForKey returns the client of the shard's master for key.
	clusterClient interface {
		MasterForKey(ctx context.Context, key string) (*redis.Client, error)
		ReloadState(ctx context.Context)
	}
)

// pinned returns one connection to the master that owns key; the caller
// closes it, which gives it back to the pool.
func (r *Store) pinned(ctx context.Context, key string) (*redis.Conn, error) {
	switch c := r.rdb.(type) {
	case clusterClient:
		node, err := c.MasterForKey(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("master for %s: %w", key, err)
		}
		return node.Conn(), nil
	case connClient:
		return c.Conn(), nil
	}
	return nil, fmt.Errorf("min replicas ack needs a *redis.Client or *redis.ClusterClient, not %T", r.rdb)
}

// noteMoved reloads the Cluster layout when err is a redirection: the slot
// moved to another master since the client last read the layout, and a
// pinned connection, unlike the ClusterClient itself, does not follow it.
func (r *Store) noteMoved(ctx context.Context, err error) {
	if c, ok := r.rdb.(clusterClient); ok && err != nil {
		if s := err.Error(); strings.HasPrefix(s, "MOVED ") || strings.HasPrefix(s, "ASK ") {
			c.ReloadState(ctx)
		}
	}
}

// wait runs WAIT on conn for at most d, further capped by half of what is
// left of ctx, and returns how many replicas acknowledged.
func (r *Store) wait(ctx context.Context, conn *redis.Conn, d time.Duration) (int, time.Duration, error) {
	d = min(d, r.ack.timeout)
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl)/2)
	}
	d = max(d, time.Millisecond)
	n, err := conn.Wait(ctx, r.ack.n, d).Result()
	return int(n), d, err
}

// claimAcked is Claim under WithMinReplicasAck: the claim script, and if it
// won, WAIT, on one pinned connection.
func (r *Store) claimAcked(ctx context.Context, slot lock.Slot, replica string, p lock.Policy) (lock.Claim, error) {
	state, _ := Keys(r.prefix, slot)
	sent := time.Now()
	conn, err := r.pinned(ctx, state)
	if err != nil {
		return lock.Claim{}, redisErr(fmt.Errorf("lock: claim %s: %w", slot, err))
	}
	defer conn.Close()
	keys, args := r.claimArgs(slot, replica, p)
	cmd := runOne(ctx, conn, claimScript, keys, args...)
	// A claim found held by its own lost one is in doubt for the next
	// claim (not sent again here: a WAIT follows each claim on this path).
	c, err, _ := r.claimReply(cmd, slot, replica, sent)
	if err != nil {
		r.noteMoved(ctx, cmd.Err())
		return lock.Claim{}, err
	}
	if c.Result != lock.Won {
		return c, nil
	}
	acks, waited, err := r.wait(ctx, conn, p.Lease/4)
	if err == nil && acks >= r.ack.n {
		return c, nil
	}
	// Fail closed: the claim may not survive a failover, so give it back.
	if err != nil {
		err = fmt.Errorf("wait for %d replicas: %w", r.ack.n, err)
	} else {
		err = fmt.Errorf("%w: %d of %d replicas within %v", ErrNotReplicated, acks, r.ack.n, waited)
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(p.Lease/3, time.Second))
	defer cancel()
	owner := lock.Owner{ID: replica, Attempt: c.Attempt}
	if rerr := r.Release(rctx, slot, owner); rerr != nil {
		return lock.Claim{}, redisErr(fmt.Errorf("lock: claim %s attempt %d: %w; release: %v (the lease runs out by itself)", slot, c.Attempt, err, rerr))
	}
	return lock.Claim{}, redisErr(fmt.Errorf("lock: claim %s attempt %d: %w; released", slot, c.Attempt, err))
}

// completeAcked is Complete under WithMinReplicasAck: the complete script,
// and if it succeeded, a done notice and WAIT, on one pinned connection.
// complete.lua tells no one; here every replica claims each slot (there is
// no preferred claimant), and the peers that lost the race settle on the
// notice, so that a failover that then loses an unacknowledged marker
// finds no peer about to claim the slot again (docs/stores.md).
func (r *Store) completeAcked(ctx context.Context, slot lock.Slot, owner lock.Owner, doneTTL time.Duration) error {
	keys, args := r.completeArgs(slot, owner, doneTTL, nil)
	conn, err := r.pinned(ctx, keys[0])
	if err != nil {
		return redisErr(fmt.Errorf("lock: complete %s attempt %d: %w", slot, owner.Attempt, err))
	}
	defer conn.Close()
	n, err := runOne(ctx, conn, completeScript, keys, args...).Int()
	if err != nil {
		r.noteMoved(ctx, err)
		return redisErr(fmt.Errorf("lock: complete %s attempt %d: %w", slot, owner.Attempt, err))
	}
	if n != 1 {
		return fmt.Errorf("lock: complete %s attempt %d: %w", slot, owner.Attempt, lock.ErrNotHeld)
	}
	// A hint: a peer that misses it claims the slot when its lease ends.
	conn.Publish(ctx, r.doneCh, keys[0])
	acks, waited, err := r.wait(ctx, conn, r.ack.timeout)
	if err != nil {
		return notReplicated(fmt.Errorf("lock: complete %s attempt %d: done on the master; %w: wait: %v", slot, owner.Attempt, ErrNotReplicated, err))
	}
	if acks < r.ack.n {
		return notReplicated(fmt.Errorf("lock: complete %s attempt %d: done on the master; %w: %d of %d replicas within %v",
			slot, owner.Attempt, ErrNotReplicated, acks, r.ack.n, waited))
	}
	return nil
}

// notReplicated is the StoreError of a complete that marked the slot done
// on the master but was not acknowledged by enough replicas: applied, so
// that the lease does not retry it.
func notReplicated(err error) error {
	return &lock.StoreError{Kind: lock.KindNoReplicas, Store: "redis", Code: "NOREPLICAS", Fix: noReplicasFix, Applied: true, Err: err}
}
