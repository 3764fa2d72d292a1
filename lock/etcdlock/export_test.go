package etcdlock

import "github.com/slotd/slotd/lock"

// LoseReply leaves slot as a won claim whose reply never came back leaves
// it: the keys written on the replica's lease, which this Store keeps
// alive, and no hold of it here.
func LoseReply(s *Store, slot lock.Slot) {
	state, _, _ := s.keys(slot)
	s.holds.remove(state)
}
