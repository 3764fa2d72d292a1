package etcdlock

import (
	"context"
	"fmt"
	"strconv"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/slotd/slotd/lock"
)

// maxTxnTries bounds a claim's or rerun's transactions when the slot's keys
// change between its read and its write (a peer claimed meanwhile).
const maxTxnTries = 8

// Claim implements lock.Store. A free slot with no attempts yet is won in
// one transaction; otherwise the transaction's else branch reads the keys,
// and a second transaction writes them if their mod revisions have not
// moved. The keepalive that proves the owner's lease runs beside the
// transaction; Claim.Sent is the earlier of the claim's and that
// keepalive's send times, so that the lease's watchdog counts from a time
// at which the lease is known to have had its whole TTL left.
func (s *Store) Claim(ctx context.Context, slot lock.Slot, replica string, p lock.Policy) (lock.Claim, error) {
	sent := time.Now()
	c, err := s.claim(ctx, slot, replica, p, sent)
	if err != nil {
		return lock.Claim{}, s.claimErr(slot, err)
	}
	return c, nil
}

func (s *Store) claimErr(slot lock.Slot, err error) error {
	state, attempts, _ := s.keys(slot)
	return etcdErr(fmt.Errorf("etcdlock: claim %s (keys %s, %s): %w", slot, state, attempts, err))
}

// outside reports whether slot's window is closed, or not yet open, by
// the store's clock (whose bounds are lo and hi).
func outside(slot lock.Slot, p lock.Policy, lo, hi time.Time) bool {
	return lo.Before(slot.Time.Add(-p.Tolerance)) || !hi.Before(slot.Deadline)
}

// won finishes a won claim: it waits for the keepalive that proves the
// lease (the claim is an error, of unknown outcome, without a proof),
// counts the lease's validity from the earlier of the claim's send time
// and the proof's, and records the hold (done: the bucket lease the claim
// put the attempts counter on, 0 if not known).
func (s *Store) won(ctx context.Context, c lock.Claim, slot lock.Slot, replica string, p lock.Policy, t ticket, done clientv3.LeaseID) (lock.Claim, error) {
	from, err := t.proven(ctx)
	if err != nil {
		// Won, but the lease is not proven alive: the outcome is
		// unknown, and the task must not run. The key frees by itself.
		return lock.Claim{}, fmt.Errorf("won, but the lease's keepalive failed: %w", err)
	}
	c.Sent = minTime(c.Sent, from)
	state, _, _ := s.keys(slot)
	s.holds.add(state, lock.Value{Owner: lock.Owner{ID: replica, Attempt: c.Attempt}}.String(), t.id, done, p.Lease, c.Sent)
	return c, nil
}

func (s *Store) claim(ctx context.Context, slot lock.Slot, replica string, p lock.Policy, sent time.Time) (lock.Claim, error) {
	lo, hi, err := s.clock.now(ctx)
	if err != nil {
		return lock.Claim{}, err
	}
	c := lock.Claim{Now: lo.UTC(), Sent: sent}
	state, _, _ := s.keys(slot)
	earliest := slot.Time.Add(-p.Tolerance)
	if outside(slot, p, lo, hi) {
		// Outside the window by the clock: a read says whether the slot is
		// held or done anyway, as the Redis script answers.
		resp, err := s.cli.Get(ctx, state)
		if err != nil {
			return lock.Claim{}, err
		}
		v, isBackoff := lock.Value{}, false
		if len(resp.Kvs) > 0 {
			if v, isBackoff = backoffOf(resp.Kvs[0]); !isBackoff {
				return held(c, resp.Kvs[0], p)
			}
		}
		if lo.Before(earliest) {
			c.Result, c.Wait = lock.Early, earliest.Sub(lo)
		} else {
			c.Result, c.Backoff = lock.Late, isBackoff && !v.NotBefore.Before(slot.Deadline)
		}
		return c, nil
	}
	for try := 0; try < 2; try++ {
		t, err := s.leases.forClaim(ctx, replica, p.Lease)
		if err != nil {
			return lock.Claim{}, err
		}
		var on, done clientv3.LeaseID
		err = s.withBucket(ctx, p.DoneTTL, func(d clientv3.LeaseID) error {
			var err error
			done = d
			c, on, err = s.claimTxn(ctx, c, slot, replica, p, t.id, d)
			return err
		})
		if isLeaseNotFound(err) { // the running lease expired: grant another
			s.leases.forgetRunning(t.id)
			continue
		}
		if err != nil || on == 0 {
			return c, err
		}
		if on != t.id { // found again: its counter is on a lease not known here
			done = 0
		}
		if t, err = s.ticketFor(t, on); err != nil {
			return lock.Claim{}, err
		}
		return s.won(ctx, c, slot, replica, p, t, done)
	}
	return lock.Claim{}, errLeaseGone
}

// ticketFor is the ticket that proves lease on alive: t, if t is on's,
// else a keepalive of on (a claim found again, on an older lease).
func (s *Store) ticketFor(t ticket, on clientv3.LeaseID) (ticket, error) {
	if on == t.id {
		return t, nil
	}
	return s.leases.forRenew(on)
}

// claimTxn runs the claim's transactions with the running lease run and
// the done bucket's lease done.
func (s *Store) claimTxn(ctx context.Context, c lock.Claim, slot lock.Slot, replica string, p lock.Policy,
	run, done clientv3.LeaseID) (lock.Claim, clientv3.LeaseID, error) {
	octx, cancel := opContext(ctx)
	defer cancel()
	resp, err := s.cli.Txn(octx).If(firstClaimIf(s, slot)...).Then(firstClaimThen(s, slot, replica, run, done)...).
		Else(readSlot(s, slot)...).Commit()
	return s.claimFrom(ctx, c, slot, replica, p, run, done, resp, err)
}

// firstClaimIf, firstClaimThen and readSlot are the first claim
// transaction of a slot: if no state, attempts or base key exists, count
// attempt 1 and hold the slot; else read the three keys.
func firstClaimIf(s *Store, slot lock.Slot) []clientv3.Cmp {
	state, attempts, base := s.keys(slot)
	return []clientv3.Cmp{
		clientv3.Compare(clientv3.Version(state), "=", 0),
		clientv3.Compare(clientv3.Version(attempts), "=", 0),
		clientv3.Compare(clientv3.Version(base), "=", 0),
	}
}

func firstClaimThen(s *Store, slot lock.Slot, replica string, run, done clientv3.LeaseID) []clientv3.Op {
	state, attempts, _ := s.keys(slot)
	return []clientv3.Op{
		clientv3.OpPut(attempts, "1", clientv3.WithLease(done)),
		clientv3.OpPut(state, lock.Value{Owner: lock.Owner{ID: replica, Attempt: 1}}.String(), clientv3.WithLease(run)),
	}
}

func readSlot(s *Store, slot lock.Slot) []clientv3.Op {
	state, attempts, base := s.keys(slot)
	return []clientv3.Op{clientv3.OpGet(state), clientv3.OpGet(attempts), clientv3.OpGet(base)}
}

// claimFrom goes on from the answer to a slot's first claim transaction:
// won, or decided from the keys it read, or a second transaction compared
// on their mod revisions (again while they keep changing). A won claim is
// on the running lease it returns (0: not won): run, or the lease of an
// earlier claim of replica's found again (foundAgain).
func (s *Store) claimFrom(ctx context.Context, c lock.Claim, slot lock.Slot, replica string, p lock.Policy,
	run, done clientv3.LeaseID, resp *clientv3.TxnResponse, err error) (lock.Claim, clientv3.LeaseID, error) {
	state, attempts, base := s.keys(slot)
	for try := 0; ; try++ {
		if err != nil {
			return c, 0, err
		}
		if resp.Succeeded {
			if c.Attempt == 0 {
				c.Attempt = 1
			}
			c.Result = lock.Won
			if resp.Header != nil { // a nested transaction's answer has none
				c.Revision = resp.Header.Revision
			}
			return c, run, nil
		}
		if try >= maxTxnTries {
			return c, 0, errTooContended
		}
		sk, ak, bk := one(resp.Responses[0]), one(resp.Responses[1]), one(resp.Responses[2])
		// A retry backoff holds the slot until it ends by the clock's lower
		// bound (c.Now); then the slot is free, and the write compares the
		// backoff key's revision instead of its absence.
		var ended *mvccpb.KeyValue
		if v, ok := backoffOf(sk); ok {
			if bc, waits := c.AfterBackoff(slot, v, c.Now); waits {
				return bc, 0, nil
			}
			ended = sk
		}
		if sk != nil && ended == nil {
			c, err := held(c, sk, p)
			if err != nil || c.Result != lock.Held {
				return c, 0, err
			}
			if n, _ := count(attempts, ak); n != c.Attempt {
				return c, 0, nil // not the claim that counted the last attempt
			}
			if on := s.foundAgain(state, replica, sk, c.Attempt); on != 0 {
				c.Result, c.Revision = lock.Won, sk.ModRevision
				c.Holder, c.Instance, c.Wait = "", "", 0
				c.Base, err = count(base, bk)
				return c, on, err
			}
			return c, 0, nil
		}
		// n and b are declared apart so that err stays the loop's: the
		// compared transaction below answers through it (a := here would
		// hide its error, and the next turn would read a nil resp).
		var n, b int
		if n, err = count(attempts, ak); err != nil {
			return c, 0, err
		}
		if b, err = count(base, bk); err != nil {
			return c, 0, err
		}
		c.Base = b
		if n-b >= p.MaxAttempts || n >= lock.MaxAttempts {
			c.Result, c.Attempt = lock.Exhausted, n
			return c, 0, nil
		}
		c.Attempt = n + 1
		then := []clientv3.Op{
			clientv3.OpPut(attempts, strconv.Itoa(n+1), clientv3.WithLease(done)),
			clientv3.OpPut(state, lock.Value{Owner: lock.Owner{ID: replica, Attempt: n + 1}}.String(), clientv3.WithLease(run)),
		}
		if b > 0 {
			then = append(then, clientv3.OpPut(base, strconv.Itoa(b), clientv3.WithLease(done)))
		}
		octx, cancel := opContext(ctx)
		resp, err = s.cli.Txn(octx).If(
			clientv3.Compare(clientv3.ModRevision(state), "=", modRev(ended)),
			clientv3.Compare(clientv3.ModRevision(attempts), "=", modRev(ak)),
			clientv3.Compare(clientv3.ModRevision(base), "=", modRev(bk)),
		).Then(then...).Else(
			clientv3.OpGet(state), clientv3.OpGet(attempts), clientv3.OpGet(base),
		).Commit()
		cancel()
	}
}

// foundAgain returns the running lease of state key kv if kv holds an
// earlier claim by replica, attempt n, whose reply was lost (the
// connection dropped, or the call's ctx ended, after it was sent): a claim
// on a lease this Store keeps alive, which it does not hold. Such a key
// would hold the slot for as long as the replica's other slots keep the
// lease alive; it is this claim now. 0 otherwise.
func (s *Store) foundAgain(state, replica string, kv *mvccpb.KeyValue, n int) clientv3.LeaseID {
	value := lock.Value{Owner: lock.Owner{ID: replica, Attempt: n}}.String()
	if string(kv.Value) != value || kv.Lease == 0 || !s.leases.live(clientv3.LeaseID(kv.Lease)) {
		return 0
	}
	if _, held := s.holds.lease(state, value); held {
		return 0
	}
	return clientv3.LeaseID(kv.Lease)
}

// held is the answer for a slot whose state key kv exists: held, done, or
// a foreign value. A held slot's Wait is the policy's lease: the holder's
// lease is its replica's, renewed with every renewal of its slots, and the
// watch wakes the waiter when the key goes.
func held(c lock.Claim, kv *mvccpb.KeyValue, p lock.Policy) (lock.Claim, error) {
	st, err := parseState(string(kv.Value))
	if err != nil {
		return lock.Claim{}, err
	}
	c.Holder, c.Instance, c.Attempt = st.Holder, st.Instance, st.Attempt
	if st.Status == "done" {
		c.Result = lock.Done
	} else {
		c.Result, c.Wait = lock.Held, p.Lease
	}
	return c, nil
}

// one is the key a single-key Get of a transaction found, or nil.
func one(r *pb.ResponseOp) *mvccpb.KeyValue {
	if g := r.GetResponseRange(); g != nil && len(g.Kvs) > 0 {
		return g.Kvs[0]
	}
	return nil
}

// count reads a counter key (0 if absent).
func count(key string, kv *mvccpb.KeyValue) (int, error) {
	if kv == nil {
		return 0, nil
	}
	n, err := strconv.Atoi(string(kv.Value))
	if err != nil {
		return 0, fmt.Errorf("%s %w: %q", key, lock.ErrForeign, kv.Value)
	}
	return n, nil
}

func modRev(kv *mvccpb.KeyValue) int64 {
	if kv == nil {
		return 0
	}
	return kv.ModRevision
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
