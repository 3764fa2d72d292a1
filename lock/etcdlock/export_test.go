package etcdlock

import (
	"context"

	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/internal/kv"
)

// KV is the key-value store under s's fleet and controls.
func KV(s *Store) kv.Store { return etcdKV{s} }

// LoseReply leaves slot as a won claim whose reply never came back leaves
// it: the keys written on the replica's lease, which this Store keeps
// alive, and no hold of it here.
func LoseReply(s *Store, slot lock.Slot) {
	state, _, _ := s.keys(slot)
	s.holds.remove(state)
}

// ClaimAfterRead reads slot's keys with a live context, as a claim's first
// transaction does when the slot is not free, and goes on from that answer
// with ctx, so that the compared transaction runs under ctx alone.
func ClaimAfterRead(ctx context.Context, s *Store, slot lock.Slot, replica string, p lock.Policy) (lock.Claim, error) {
	resp, err := s.cli.Txn(context.Background()).If().Then(readSlot(s, slot)...).Commit()
	if err != nil {
		return lock.Claim{}, err
	}
	resp.Succeeded = false // the first claim's If failed: the keys were read in its Else
	c, _, err := s.claimFrom(ctx, lock.Claim{}, slot, replica, p, 0, 0, resp, err)
	return c, err
}

// KeysPerLease is how many claims one running lease, and how many writes
// one bucket lease, carries at most.
const KeysPerLease = keysPerLease
