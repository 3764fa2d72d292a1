package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/slotd/slotd/lock"
)

// Renew implements lock.Store: one transaction compares the state key's
// value and lease with owner's, beside a keepalive of owner's lease sent
// after Renew was called (shared with every other renewal under that
// lease). It succeeds only if both do; a lease that a keepalive found gone
// answers lock.ErrNotHeld for every slot held under it.
func (s *Store) Renew(ctx context.Context, slot lock.Slot, owner lock.Owner, lease time.Duration) error {
	called := time.Now()
	state, _, _ := s.keys(slot)
	id, ok := s.holds.lease(state, lock.Value{Owner: owner}.String())
	t, err := s.leases.forRenew(id)
	if !ok {
		err = errNoLease
	}
	if err == nil {
		var resp *clientv3.TxnResponse
		resp, err = s.txn(ctx, txnReq{key: state, cmps: []clientv3.Cmp{
			clientv3.Compare(clientv3.Value(state), "=", lock.Value{Owner: owner}.String()),
			clientv3.Compare(clientv3.LeaseValue(state), "=", t.id),
		},
			// A transaction of compares alone is read-only with no
			// request that asks for a linearizable read, and etcd serves
			// it from the member's own state, which may lag: a renewal
			// sent just after its claim won found the key missing (it read
			// the revision before the claim's). A count of the key makes it
			// a linearizable read.
			then: []clientv3.Op{clientv3.OpGet(state, clientv3.WithCountOnly())},
		})
		switch {
		case err != nil:
		case !resp.Succeeded:
			err = errNoLease
		default:
			_, err = t.wait(ctx)
		}
	}
	switch {
	case errors.Is(err, errNoLease), errors.Is(err, errLeaseGone):
		s.holds.remove(state)
		return fmt.Errorf("etcdlock: renew %s attempt %d: %w (%w)", slot, owner.Attempt, lock.ErrNotHeld, err)
	case err != nil:
		return etcdErr(fmt.Errorf("etcdlock: renew %s attempt %d: %w", slot, owner.Attempt, err))
	}
	s.holds.touch(state, called)
	return nil
}

// Complete implements lock.Store: one transaction that, if owner holds the
// slot, writes the done marker and moves the attempts counter (and the
// rerun base, if any) onto the done TTL's bucket lease.
//
// A completion counts for the janitor (holds) as a renewal does: a
// holder retries it, past its lease if need be (lock.Lease.Complete), and
// its task has ended, so its hold must stay until the completion lands
// or the holder stops trying, not be deleted a lease after the last
// renewal — that would let a peer run the succeeded slot again.
func (s *Store) Complete(ctx context.Context, slot lock.Slot, owner lock.Owner, doneTTL time.Duration) error {
	state, attempts, base := s.keys(slot)
	s.holds.touch(state, time.Now())
	lo, _, err := s.clock.now(ctx)
	if err != nil {
		return etcdErr(fmt.Errorf("etcdlock: complete %s attempt %d: %w", slot, owner.Attempt, err))
	}
	var resp *clientv3.TxnResponse
	// The claim's bucket lease, while it is still the bucket of doneTTL
	// from now (a short attempt): the attempts counter is on it already.
	prefer := s.holds.done(state, lock.Value{Owner: owner}.String())
	err = s.withBucketOf(ctx, doneTTL, prefer, func(done clientv3.LeaseID) error {
		// keep the value, change the lease: unless the key is on it
		// already, so that it costs no write
		move := func(key string) clientv3.Op {
			return clientv3.OpTxn([]clientv3.Cmp{
				clientv3.Compare(clientv3.Version(key), ">", 0),
				clientv3.Compare(clientv3.LeaseValue(key), "!=", done),
			},
				[]clientv3.Op{clientv3.OpPut(key, "", clientv3.WithIgnoreValue(), clientv3.WithLease(done))}, nil)
		}
		var err error
		resp, err = s.txn(ctx, txnReq{key: state,
			cmps: []clientv3.Cmp{clientv3.Compare(clientv3.Value(state), "=", lock.Value{Owner: owner}.String())},
			then: []clientv3.Op{
				clientv3.OpPut(state, lock.Value{Owner: owner, Done: true, Finished: time.UnixMilli(lo.UnixMilli())}.String(), clientv3.WithLease(done)),
				move(attempts), move(base),
			},
			els: []clientv3.Op{clientv3.OpGet(state)},
		})
		return err
	})
	if err != nil {
		return etcdErr(fmt.Errorf("etcdlock: complete %s attempt %d: %w", slot, owner.Attempt, err))
	}
	if resp.Succeeded {
		s.holds.remove(state)
		return nil
	}
	if kv := one(resp.Responses[0]); kv != nil && strings.HasPrefix(string(kv.Value), doneOf(owner)) {
		return nil // completed already: a retry after a lost reply
	}
	s.holds.remove(state)
	return fmt.Errorf("etcdlock: complete %s attempt %d: %w", slot, owner.Attempt, lock.ErrNotHeld)
}

// doneOf is the prefix of owner's done value.
func doneOf(owner lock.Owner) string {
	return strings.TrimSuffix(lock.Value{Owner: owner, Done: true, Finished: time.UnixMilli(0)}.String(), "0")
}

// Release implements lock.Store: one transaction deletes the state key if
// owner holds it, and puts its release notice (releases.go); the deletion
// wakes the watchers of every replica.
func (s *Store) Release(ctx context.Context, slot lock.Slot, owner lock.Owner) error {
	state, _, _ := s.keys(slot)
	var resp *clientv3.TxnResponse
	err := s.withBucket(ctx, noticeTTL, func(notice clientv3.LeaseID) error {
		var err error
		resp, err = s.txn(ctx, txnReq{key: state,
			cmps: []clientv3.Cmp{clientv3.Compare(clientv3.Value(state), "=", lock.Value{Owner: owner}.String())},
			then: []clientv3.Op{clientv3.OpDelete(state), s.noticeOp(state, notice)},
		})
		return err
	})
	if err != nil {
		return etcdErr(fmt.Errorf("etcdlock: release %s attempt %d: %w", slot, owner.Attempt, err))
	}
	s.holds.remove(state)
	if !resp.Succeeded {
		return fmt.Errorf("etcdlock: release %s attempt %d: %w", slot, owner.Attempt, lock.ErrNotHeld)
	}
	return nil
}

// Rerun implements lock.Store: it reads the slot's keys and, in one
// transaction compared on their mod revisions, deletes the state, keeps
// the attempts made as the new base (on the counter's lease) and puts the
// slot's release notice (releases.go). Rerun.Woken
// counts this process's watchers of the slot; every replica's watch sees
// the deletion.
func (s *Store) Rerun(ctx context.Context, slot lock.Slot, force bool) (lock.Rerun, error) {
	state, attempts, base := s.keys(slot)
	for try := 0; try < maxTxnTries; try++ {
		rd, err := s.cli.Txn(ctx).Then(clientv3.OpGet(state), clientv3.OpGet(attempts), clientv3.OpGet(base)).Commit()
		if err != nil {
			return lock.Rerun{}, etcdErr(fmt.Errorf("etcdlock: rerun %s: %w", slot, err))
		}
		sk, ak, bk := one(rd.Responses[0]), one(rd.Responses[1]), one(rd.Responses[2])
		var out lock.Rerun
		n, nerr := count(attempts, ak)
		out.Attempts = n
		if sk != nil {
			out.Previous = string(sk.Value)
			if !force && !strings.HasPrefix(out.Previous, "done:") && !strings.HasPrefix(out.Previous, lock.BackoffPrefix) {
				out.Refused = "foreign"
				if strings.HasPrefix(out.Previous, "run:") {
					out.Refused = "running"
				}
				out.TTL = s.leaseTTL(ctx, clientv3.LeaseID(sk.Lease))
				return out, nil
			}
		}
		ops := []clientv3.Op{clientv3.OpDelete(state)}
		switch {
		case ak != nil && nerr == nil:
			ops = append(ops, clientv3.OpPut(base, strconv.Itoa(n), clientv3.WithLease(clientv3.LeaseID(ak.Lease))))
		case ak != nil:
			out.Attempts = 0
			ops = append(ops, clientv3.OpDelete(attempts), clientv3.OpDelete(base))
		default:
			ops = append(ops, clientv3.OpDelete(base))
		}
		notice, err := s.ttlLease(ctx, noticeTTL)
		if err != nil {
			return lock.Rerun{}, etcdErr(fmt.Errorf("etcdlock: rerun %s: %w", slot, err))
		}
		ops = append(ops, s.noticeOp(state, notice))
		resp, err := s.cli.Txn(ctx).If(
			clientv3.Compare(clientv3.ModRevision(state), "=", modRev(sk)),
			clientv3.Compare(clientv3.ModRevision(attempts), "=", modRev(ak)),
			clientv3.Compare(clientv3.ModRevision(base), "=", modRev(bk)),
		).Then(ops...).Commit()
		if isLeaseNotFound(err) { // the counter's lease ran out meanwhile, or the notice's was revoked
			s.forgetLease(notice)
			continue
		}
		if err != nil {
			return lock.Rerun{}, etcdErr(fmt.Errorf("etcdlock: rerun %s: %w", slot, err))
		}
		if resp.Succeeded {
			out.Cleared, out.Woken = true, int64(s.hub.count(state))
			s.holds.remove(state)
			return out, nil
		}
	}
	return lock.Rerun{}, fmt.Errorf("etcdlock: rerun %s: %w", slot, errTooContended)
}

// leaseTTL is what is left of lease id, for States and Rerun (0 if none or
// unknown).
func (s *Store) leaseTTL(ctx context.Context, id clientv3.LeaseID) time.Duration {
	if id == clientv3.NoLease {
		return 0
	}
	resp, err := s.cli.TimeToLive(ctx, id)
	if err != nil || resp.TTL <= 0 {
		return 0
	}
	return time.Duration(resp.TTL) * time.Second
}

// statesPerTxn keeps a States transaction within etcd's default limit of
// 128 operations (--max-txn-ops): two reads per slot.
const statesPerTxn = 64

// States implements lock.Store: the state and attempts keys of up to 64
// slots per transaction, and one TimeToLive per distinct lease for the
// TTLs.
func (s *Store) States(ctx context.Context, slots []lock.Slot) ([]lock.State, error) {
	out := make([]lock.State, 0, len(slots))
	var errs []error
	ttls := map[int64]time.Duration{}
	for from := 0; from < len(slots); from += statesPerTxn {
		chunk := slots[from:min(from+statesPerTxn, len(slots))]
		ops := make([]clientv3.Op, 0, 2*len(chunk))
		for _, slot := range chunk {
			state, attempts, _ := s.keys(slot)
			ops = append(ops, clientv3.OpGet(state), clientv3.OpGet(attempts))
		}
		resp, err := s.cli.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return nil, etcdErr(fmt.Errorf("etcdlock: state of %d slots: %w", len(slots), err))
		}
		for i, slot := range chunk {
			sk, ak := one(resp.Responses[2*i]), one(resp.Responses[2*i+1])
			st := lock.State{Status: "free"}
			var err error
			if sk != nil {
				if st, err = parseState(string(sk.Value)); err == nil {
					ttl, ok := ttls[sk.Lease]
					if !ok {
						ttl = s.leaseTTL(ctx, clientv3.LeaseID(sk.Lease))
						ttls[sk.Lease] = ttl
					}
					st.TTL = ttl
				}
			}
			if ak != nil {
				n, aerr := strconv.Atoi(string(ak.Value))
				if aerr != nil {
					err = errors.Join(err, fmt.Errorf("attempts %w: %q", lock.ErrForeign, ak.Value))
				}
				st.Attempts = n
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("etcdlock: state %s: %w", slot, err))
			}
			out = append(out, st)
		}
	}
	return out, errors.Join(errs...)
}
