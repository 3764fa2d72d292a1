package scheduler

import (
	"fmt"
	"hash/fnv"
	"testing"

	"github.com/slotd/slotd/lock"
)

// refWeight is the rendezvous weight as every version of slotd defines it
// (prefer.go): FNV-1a over id, "\x00", task, ":", slot id, then
// splitmix64's finaliser. Written here from the standard library's FNV so
// that a change of the engine's faster form cannot pass unseen.
func refWeight(id string, slot lock.Slot) uint64 {
	h := fnv.New64a()
	h.Write([]byte(id + "\x00" + slot.Task + ":" + slot.ID))
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// The preferred claimant is the same function of the live ids and the slot
// as it always was, so that a fleet mid-upgrade agrees on it: each replica
// of a set of ids of various lengths is preferred for exactly the slots
// whose highest reference weight is its own.
func TestPreferredWeightIsTheFleetsFunction(t *testing.T) {
	ids := []string{"a", "web-1", "web-2", "host-0123456789abcdef-4242", "r", "replica-with-a-rather-long-hostname-12345"}
	replicas := make([]*Scheduler, len(ids))
	for i, id := range ids {
		replicas[i] = &Scheduler{replica: id}
		replicas[i].setLive(ids)
	}
	for n := range 2000 {
		slot := lock.Slot{Task: fmt.Sprintf("task-%d", n%37), ID: fmt.Sprintf("2026112910%04d", n)}
		want, wantW := "", uint64(0)
		for _, id := range ids {
			if w := refWeight(id, slot); want == "" || w > wantW {
				want, wantW = id, w
			}
		}
		for _, s := range replicas {
			if got := s.preferred(slot); got != (s.replica == want) {
				t.Fatalf("slot %s: replica %s preferred %v; the reference prefers %s", slot, s.replica, got, want)
			}
		}
	}
}
