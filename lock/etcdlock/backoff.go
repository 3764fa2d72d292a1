package etcdlock

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/slotd/slotd/lock"
)

// ReleaseAfter implements lock.Store: one transaction replaces the
// state key, if owner holds it, by a backoff value whose not-before time
// is the members' clock (its upper bound) plus delay, on a bucket lease
// that outlives it, and puts the slot's release notice (releases.go); the
// put wakes every replica's watch as a deletion does. A claim compares the not-before time with the clock's lower bound,
// so no attempt starts before delay has passed by the members' clock.
func (s *Store) ReleaseAfter(ctx context.Context, slot lock.Slot, owner lock.Owner, delay time.Duration) error {
	if delay <= 0 {
		return s.Release(ctx, slot, owner)
	}
	state, _, _ := s.keys(slot)
	_, hi, err := s.clock.now(ctx)
	if err != nil {
		return etcdErr(fmt.Errorf("etcdlock: release %s attempt %d: %w", slot, owner.Attempt, err))
	}
	backoff := lock.Value{NotBefore: hi.Add(delay)}.String()
	var resp *clientv3.TxnResponse
	err = s.withBucket(ctx, noticeTTL, func(notice clientv3.LeaseID) error {
		return s.withBucket(ctx, delay, func(id clientv3.LeaseID) error {
			var err error
			resp, err = s.txn(ctx, txnReq{key: state,
				cmps: []clientv3.Cmp{clientv3.Compare(clientv3.Value(state), "=", lock.Value{Owner: owner}.String())},
				then: []clientv3.Op{clientv3.OpPut(state, backoff, clientv3.WithLease(id)), s.noticeOp(state, notice)},
			})
			return err
		})
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

// backoffOf reads a state key that holds a retry backoff.
func backoffOf(kv *mvccpb.KeyValue) (lock.Value, bool) {
	if kv == nil || !strings.HasPrefix(string(kv.Value), lock.BackoffPrefix) {
		return lock.Value{}, false
	}
	v, err := lock.ParseValue(string(kv.Value))
	return v, err == nil
}
