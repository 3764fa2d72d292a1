package etcdlock

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// leases are the etcd leases a Store writes under: the running leases, one
// per owner and lease length at a time, kept alive on demand over one
// keepalive stream; and the done buckets, one per expiry bucket of the done
// TTLs, never kept alive (they expire by themselves).
type leases struct {
	cli  *clientv3.Client
	ka   *kaStream
	base time.Time // the bucket grid is counted from here, on the monotonic clock

	mu      sync.Mutex
	current map[runKey]*runLease               // the lease new claims of an owner go on
	byID    map[clientv3.LeaseID]*runLease     // every running lease that may still hold slots
	buckets map[time.Duration]*bucketLease     // by end of bucket, counted from base
	ends    map[clientv3.LeaseID]time.Duration // each granted bucket lease's end, while its bucket may be chosen
	swept   int                                // len(ends) after its last sweep
}

type runKey struct {
	owner string
	ttl   int64 // seconds
}

// runLease is one owner's lease of one length. It has at most one
// keepalive in flight (inflight) and at most one waiting for it to come
// back (next), which every Renew that arrives meanwhile joins.
type runLease struct {
	key       runKey
	id        clientv3.LeaseID
	claims    int           // claims sent on it: at keysPerLease, the next claim grants another
	ready     chan struct{} // closed once granted (or failed: err)
	err       error
	dead      bool      // a keepalive found it gone
	confirmed time.Time // send time of the last grant or keepalive etcd confirmed
	inflight  *round
	next      *round
}

// round is one keepalive of a running lease: sent at sent, done when its
// answer came (err nil: the lease lives at least its TTL from sent).
type round struct {
	sent time.Time
	done chan struct{}
	err  error
}

// ticket is what an operation holds while its keepalive (or the lease's
// grant) is under way.
type ticket struct {
	id        clientv3.LeaseID
	r         *round        // nil: granted for this operation, at granted
	granted   time.Time     // the grant's send time
	confirmed time.Time     // when joined: send time of the lease's last confirmed keepalive
	patience  time.Duration // when joined: how long a claim waits for r (kaTimeout)
}

// errLeaseGone: a keepalive found the owner's lease expired or revoked;
// every hold under it is lost.
var errLeaseGone = errors.New("etcdlock: the replica's lease expired")

// errNoLease: this Store keeps no such lease alive, so nothing is held
// under it here.
var errNoLease = errors.New("etcdlock: no live lease of this owner in this process")

func newLeases(ctx context.Context, cli *clientv3.Client, goOwned func(func())) *leases {
	return &leases{
		cli: cli, ka: newKAStream(ctx, cli, goOwned), base: time.Now(),
		current: map[runKey]*runLease{}, byID: map[clientv3.LeaseID]*runLease{},
		buckets: map[time.Duration]*bucketLease{}, ends: map[clientv3.LeaseID]time.Duration{},
	}
}

// leaseSeconds is lease in etcd's unit, rounded up: a key on the lease
// lives at least lease.
func leaseSeconds(lease time.Duration) int64 {
	return max(int64((lease+time.Second-1)/time.Second), 1)
}

// keysPerLease bounds the claims sent on one running lease and the writes
// on one bucket lease; past it, another lease is granted. etcd 3.4 checks
// every put on a lease against every key already on it (the auth
// applier's lease check copies the lease's key set, even with auth off), so
// a put costs each member time in proportion to the keys on its lease: with
// one lease for a burst's ten thousand slots, a quarter of the leader's CPU
// went there. A bucket write puts at most three keys (state, attempts,
// base), so no lease carries more than three times this.
const keysPerLease = 128

// forClaim returns the lease a claim by owner goes on, and the keepalive
// that proves it alive: the one in flight, if any (the claim counts its
// validity from that keepalive's send time). The owner's current lease
// serves while a keepalive confirmed it within half its TTL (it then has
// half its TTL left, time for this keepalive to land) and fewer than
// keysPerLease claims went on it; otherwise a new one is granted, and the
// old one serves the renewals of what it holds.
func (ls *leases) forClaim(ctx context.Context, owner string, lease time.Duration) (ticket, error) {
	k := runKey{owner, leaseSeconds(lease)}
	for {
		ls.mu.Lock()
		rl := ls.current[k]
		if rl != nil {
			select {
			case <-rl.ready:
				if rl.err != nil || rl.dead || rl.claims >= keysPerLease ||
					time.Since(rl.confirmed) >= time.Duration(k.ttl)*time.Second/2 {
					rl = nil
				}
			default: // being granted: wait for it
				ls.mu.Unlock()
				select {
				case <-rl.ready:
				case <-ctx.Done():
					return ticket{}, ctx.Err()
				}
				continue
			}
		}
		if rl == nil {
			return ls.grant(ctx, k) // unlocks
		}
		rl.claims++
		t, send := ls.joinLocked(rl, false)
		ls.mu.Unlock()
		if send != nil {
			ls.send(rl, send)
		}
		return t, nil
	}
}

// grant grants owner a new current lease. Called with ls.mu held; unlocks.
func (ls *leases) grant(ctx context.Context, k runKey) (ticket, error) {
	rl := &runLease{key: k, ready: make(chan struct{}), claims: 1}
	ls.current[k] = rl
	for id, old := range ls.byID { // leases no renewal can prove alive any more
		if old.dead || time.Since(old.confirmed) > 2*time.Duration(old.key.ttl)*time.Second {
			delete(ls.byID, id)
		}
	}
	ls.mu.Unlock()
	sent := time.Now()
	gctx, cancel := opContext(ctx)
	resp, err := ls.cli.Grant(gctx, k.ttl)
	cancel()
	ls.mu.Lock()
	if err != nil {
		rl.err = err
		if ls.current[k] == rl {
			delete(ls.current, k)
		}
	} else {
		rl.id, rl.confirmed = resp.ID, sent
		ls.byID[resp.ID] = rl
	}
	close(rl.ready)
	ls.mu.Unlock()
	if err != nil {
		return ticket{}, err
	}
	return ticket{id: resp.ID, granted: sent}, nil
}

// live reports whether this Store keeps lease id alive.
func (ls *leases) live(id clientv3.LeaseID) bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	rl := ls.byID[id]
	return rl != nil && !rl.dead
}

// forRenew returns the keepalive, sent after forRenew was called, that
// proves lease id alive; errNoLease if this Store keeps no such lease.
func (ls *leases) forRenew(id clientv3.LeaseID) (ticket, error) {
	ls.mu.Lock()
	rl := ls.byID[id]
	if rl == nil || rl.dead {
		ls.mu.Unlock()
		return ticket{}, errNoLease
	}
	t, send := ls.joinLocked(rl, true)
	ls.mu.Unlock()
	if send != nil {
		ls.send(rl, send)
	}
	return t, nil
}

// joinLocked joins rl's keepalive in flight, or (fresh) the one after it,
// or starts one, which the caller then sends.
func (ls *leases) joinLocked(rl *runLease, fresh bool) (t ticket, send *round) {
	r := rl.inflight
	switch {
	case r == nil:
		r = &round{sent: time.Now(), done: make(chan struct{})}
		rl.inflight, send = r, r
	case fresh:
		if rl.next == nil {
			rl.next = &round{done: make(chan struct{})}
		}
		r = rl.next
	}
	return ticket{id: rl.id, r: r, confirmed: rl.confirmed, patience: kaTimeout(rl.key.ttl)}, send
}

// kaTimeout is how long a keepalive of a lease of ttl seconds waits on
// one stream before it goes again on a fresh one (kaStream), and how long
// a claim waits for it before it counts from the lease's last confirmed
// keepalive instead (ticket.proven).
func kaTimeout(ttl int64) time.Duration {
	return min(max(time.Duration(ttl)*time.Second/3, 500*time.Millisecond), 5*time.Second)
}

// send puts r, which is rl's round in flight, on the keepalive stream. An
// answer a whole lease after r was sent proves nothing more: r fails then.
func (ls *leases) send(rl *runLease, r *round) {
	ls.ka.send(int64(rl.id), kaTimeout(rl.key.ttl), time.Duration(rl.key.ttl)*time.Second,
		func(left int64, err error) { ls.finish(rl, r, left, err) })
}

// finish records the answer to rl's round r and sends the round waiting
// behind it, if any.
func (ls *leases) finish(rl *runLease, r *round, left int64, err error) {
	ls.mu.Lock()
	switch {
	case err == nil && left <= 0:
		rl.dead, err = true, errLeaseGone
		delete(ls.byID, rl.id)
	case err == nil && r.sent.After(rl.confirmed):
		rl.confirmed = r.sent
	}
	r.err = err
	rl.inflight = nil
	next := rl.next
	rl.next = nil
	if next != nil {
		if rl.dead {
			next.err = err
			close(next.done)
			next = nil
		} else {
			next.sent = time.Now()
			rl.inflight = next
		}
	}
	ls.mu.Unlock()
	close(r.done)
	if next != nil {
		ls.send(rl, next)
	}
}

// wait waits for t's keepalive and returns the time from which the lease
// is proven to live its TTL: the keepalive's (or grant's) send time.
func (t ticket) wait(ctx context.Context) (time.Time, error) {
	if t.r == nil {
		return t.granted, nil
	}
	select {
	case <-t.r.done:
		return t.r.sent, t.r.err
	case <-ctx.Done():
		return time.Time{}, ctx.Err()
	}
}

// proven is what a claim may count its lease from: the send time of its
// keepalive; or, when that keepalive could not be confirmed (etcd was slow
// or a member changed) but did not find the lease gone, the lease's last
// confirmed keepalive before it, which forClaim made recent. A claim waits
// for its keepalive kaTimeout at most: past it, the keepalive goes on
// (a renewal may still count its answer) but the claim does not wait.
func (t ticket) proven(ctx context.Context) (time.Time, error) {
	if t.r == nil || t.confirmed.IsZero() {
		return t.wait(ctx)
	}
	wctx, cancel := context.WithDeadline(ctx, t.r.sent.Add(t.patience))
	defer cancel()
	from, err := t.wait(wctx)
	select {
	case <-t.r.done: // answered after all (wait may have seen the deadline first): a lease gone is gone
		from, err = t.r.sent, t.r.err
	default:
	}
	if err != nil && !errors.Is(err, errLeaseGone) {
		return t.confirmed, nil
	}
	return from, err
}

// forgetRunning drops lease id after etcd answered that it does not know
// it, so that the next claim grants a new one.
func (ls *leases) forgetRunning(id clientv3.LeaseID) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if rl := ls.byID[id]; rl != nil {
		rl.dead = true
		delete(ls.byID, id)
	}
}

// revokeRunning revokes every running lease that may still live (one
// confirmed within its TTL), all at once, so that what they hold frees at
// once.
func (ls *leases) revokeRunning(ctx context.Context) error {
	ls.mu.Lock()
	var ids []clientv3.LeaseID
	for id, rl := range ls.byID {
		if !rl.dead && time.Since(rl.confirmed) < time.Duration(rl.key.ttl)*time.Second {
			ids = append(ids, id)
		}
	}
	ls.mu.Unlock()
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := ls.cli.Revoke(ctx, id); err != nil && !isLeaseNotFound(err) {
				errs[i] = err
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// bucketLease is the lease the keys whose TTL ends in one bucket share,
// keysPerLease writes at most (then the bucket gets another).
type bucketLease struct {
	id     clientv3.LeaseID
	ready  chan struct{}
	err    error
	writes int
}

// bucketWidth is the width of the expiry buckets of ttl: a 64th of it,
// between a second and an hour.
func bucketWidth(ttl time.Duration) time.Duration {
	return min(max(ttl/64, time.Second), time.Hour)
}

// bucketEnd is the end of the bucket of ttl from now, counted from base.
func (ls *leases) bucketEnd(ttl time.Duration) (end, now time.Duration) {
	w := bucketWidth(ttl)
	now = time.Since(ls.base)
	return (now + ttl + w - 1) / w * w, now
}

// bucketOf is bucket, except that it returns prefer if prefer is a lease
// of that bucket (it counts no write: prefer's writer counted it).
func (ls *leases) bucketOf(ctx context.Context, ttl time.Duration, prefer clientv3.LeaseID) (clientv3.LeaseID, error) {
	if prefer != 0 {
		end, _ := ls.bucketEnd(ttl)
		ls.mu.Lock()
		e, ok := ls.ends[prefer]
		ls.mu.Unlock()
		if ok && e == end {
			return prefer, nil
		}
	}
	return ls.bucket(ctx, ttl)
}

// bucket returns a lease that lives at least ttl from now and at most one
// bucket width longer, shared with the other writes (keysPerLease in all)
// whose TTL ends in the same bucket.
func (ls *leases) bucket(ctx context.Context, ttl time.Duration) (clientv3.LeaseID, error) {
	end, now := ls.bucketEnd(ttl)
	ls.mu.Lock()
	b := ls.buckets[end]
	if b != nil {
		b.writes++
		if b.writes > keysPerLease {
			b = nil // full: the bucket gets another lease; this one's keys keep their expiry
		}
	}
	if b == nil {
		for e := range ls.buckets { // ended buckets are chosen no more
			if e < now {
				delete(ls.buckets, e)
			}
		}
		if len(ls.ends) >= 2*max(ls.swept, 64) {
			// Swept when it has doubled since the last sweep, not at each
			// grant: it holds the leases of a whole done TTL (hours, at
			// 78 grants a second for 10,000 claims a second). A lease
			// kept past its end is never preferred: its end is not the
			// bucket's.
			for id, e := range ls.ends {
				if e < now {
					delete(ls.ends, id)
				}
			}
			ls.swept = len(ls.ends)
		}
		b = &bucketLease{ready: make(chan struct{}), writes: 1}
		ls.buckets[end] = b
		ls.mu.Unlock()
		sent := time.Since(ls.base)
		gctx, cancel := opContext(ctx)
		resp, err := ls.cli.Grant(gctx, int64((end-sent+time.Second-1)/time.Second))
		cancel()
		ls.mu.Lock()
		if err != nil {
			b.err = err
			if ls.buckets[end] == b {
				delete(ls.buckets, end)
			}
		} else {
			b.id = resp.ID
			ls.ends[resp.ID] = end
		}
		close(b.ready)
	}
	ls.mu.Unlock()
	select {
	case <-b.ready:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	return b.id, b.err
}

// forgetBucket drops a bucket's lease after etcd answered that it does not
// know it.
func (ls *leases) forgetBucket(id clientv3.LeaseID) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	delete(ls.ends, id)
	for e, b := range ls.buckets {
		select {
		case <-b.ready:
			if b.id == id {
				delete(ls.buckets, e)
			}
		default:
		}
	}
}

func isLeaseNotFound(err error) bool {
	return err != nil && errors.Is(err, rpctypes.ErrLeaseNotFound)
}
