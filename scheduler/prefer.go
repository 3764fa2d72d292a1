package scheduler

import (
	"slices"
	"time"

	"github.com/slotd/slotd/lock"
)

// Preferred claimants. Every replica fires every slot, but if each then
// claimed it, two claims of three (with three replicas) would only find
// it held or done: work for Redis and for the replicas, and no use. So
// one replica per slot, its preferred claimant, claims at once, and the
// others defer their claims: they wait preferWait for the store to tell
// them the slot was taken (lock.Taken, one notice per round trip of
// claims) or done, and claim only if it was not. On a store that reports
// every release to one function they keep no run for such a slot: they
// list it and read its state after the same wait (deferral.go).
//
// How long to wait is the question. On a quiet store the notice comes a
// round trip or two after the fire time, well within preferWait. In a
// burst of thousands of slots the preferred claimants' claims take as long
// to be answered as this replica's own, so a deferring run waits while any
// claim of this replica is pending and then until no Taken notice has come
// for quietFor: the notices of its peers' claims have stopped coming.
// Whatever it waits for, it claims after deferLimit, within half of its
// slot's window.
//
// The preferred claimant is chosen by rendezvous hashing over the live
// replica ids the fleet announces (lock.Presence.Live): the id with the
// highest weight (see preferred). Every replica computes the same choice from
// the same set, a replica joining or leaving moves only its own share of
// slots, and the shares are even.
//
// A replica at its max_running (capacity.go) claims nothing, preferred or
// not: its preferred slots cost its peers their deferral, as a preferred
// claimant that died does, and no more.
//
// The choice affects who claims first, never whether a claim is safe: a
// replica whose view of the live set differs from its peers' (one
// announced or expired since its last clock check) at worst claims a slot
// a peer also claims, and the claim script settles it as before. A
// preferred claimant that died or paused before claiming delays its slots
// by preferWait (up to preferWaitMax in a burst; see loop.onWake); one that
// died or paused holding a slot is taken over when its lease runs out:
// the Taken notice makes its peers claim again before the lease could
// have run out (takenWait), and the Held reply then says to the
// millisecond when it does.
const (
	// preferWait is how long a replica that is not a slot's preferred
	// claimant waits for the slot to be taken before it claims it. Many
	// times a claim's round trip on a quiet store, so that the notice is
	// in by then.
	preferWait = 50 * time.Millisecond
	// preferWaitMax bounds the wait while this replica's own claims are in
	// flight or its peers' notices still come: in a burst, the preferred
	// claimant's claims, sent at the same time to the same store, likely
	// are in flight too, and claiming its slots before their notices are
	// in would only contend.
	preferWaitMax = 2 * time.Second
	// quietFor is how long no Taken notice must have come before a
	// deferring run claims once this replica's own claims are answered:
	// twice preferWait, since on a busy machine a peer's notices come in
	// bursts, a round trip of claims each.
	quietFor = 2 * preferWait
)

// deferLimit is the longest a run of slot defers its claim: preferWaitMax,
// and at most half of the slot's window, so that the slots of a preferred
// claimant that died (and is still in the live set, for up to its
// presence TTL: 30 s by default) run within their windows. A quarter was too short
// under sustained load on a saturated machine: 5,000 one-second slots a
// second on 2 cores had the preferred claims answered 300 ms after the
// slot time on average, so a third of the slots were claimed again, only
// to be found held or done, adding to the load that delayed them.
func deferLimit(slot lock.Slot) time.Duration {
	return min(preferWaitMax, slot.Deadline.Sub(slot.Time)/2)
}

// keepDeferring reports whether deferring run r, whose wake time has come,
// waits longer, and if so schedules its next look: while this replica's
// own claims are pending (until releaseDeferred), and until no Taken
// notice has come for quietFor, within r's deferLimit.
func (l *loop) keepDeferring(r *run) bool {
	now := l.s.clock.Now()
	if !now.Before(r.deferUntil) {
		return false
	}
	if l.pending > 0 {
		l.holdBack(r)
		l.schedule(r, r.deferUntil.Sub(now))
		return true
	}
	if quiet := l.lastTaken.Add(quietFor); now.Before(quiet) {
		l.schedule(r, min(quiet.Sub(now), r.deferUntil.Sub(now)))
		return true
	}
	return false
}

// holdBack adds r to the runs released by releaseDeferred. Under sustained
// load claims may be pending at every turn, so the list is compacted as it
// grows: the runs that have claimed or been told meanwhile leave it.
func (l *loop) holdBack(r *run) {
	l.deferred = appendCompacted(l.deferred, r, func(x *run) bool { return x.state == deferring && x.index >= 0 })
}

// releaseDeferred has the deferred runs look again preferWait from now
// once no claim of this replica is pending: the preferred claimants'
// notices, for claims that went out with ours, have had time to come.
func (l *loop) releaseDeferred() {
	if l.pending > 0 || len(l.deferred) == 0 {
		return
	}
	now := l.s.clock.Now()
	for i, r := range l.deferred {
		if r.state == deferring && r.index >= 0 && r.wakeAt.After(now.Add(preferWait)) {
			l.schedule(r, preferWait)
		}
		l.deferred[i] = nil
	}
	l.deferred = l.deferred[:0]
}

// takenWait is how long a replica told that a slot was taken waits before
// claiming it: most of a lease, counted from the notice, which came after
// the claim. Its claim then finds the slot done (usually settled before,
// by the completion notice), or held with the lease's exact remainder to
// wait, or free if the holder died.
func takenWait(lease time.Duration) time.Duration { return lease - lease/10 }

// setLive records the fleet's live replica ids, as the last announce read
// them; nil (no fleet, or a store without Taken notices): every replica
// claims every slot at once.
func (s *Scheduler) setLive(live []string) {
	if live == nil {
		s.live.Store(nil)
		return
	}
	live = slices.Clone(live)
	slices.Sort(live)
	ids := make([]liveID, len(live))
	for i, id := range live {
		ids[i] = liveID{id: id, prefix: fnv1a(fnvOffset, id, "\x00")}
	}
	s.live.Store(&ids)
}

// liveID is a live replica's id and the part of its rendezvous hash that
// every slot shares: FNV-1a's state after the id and its separator.
type liveID struct {
	id     string
	prefix uint64
}

// preferred reports whether this replica should claim slot at once: it is
// the slot's preferred claimant among the live replicas, or there is no
// live set to choose from. A replica missing from its own view of the set
// (its announce failed) is nobody's choice, so it defers every slot.
//
// A replica id's rendezvous weight for a slot is FNV-1a over the id, a
// zero byte, the task, ":" and the slot id, with splitmix64's finaliser so
// that ids differing in one character are far apart. The hash of the id
// and its zero byte is each id's own (setLive), so a slot costs the rest
// per id: the same function as ever, so that replicas of this version and
// of earlier ones, in a fleet mid-upgrade, agree on every slot's claimant
// (TestPreferredWeightIsTheFleetsFunction).
//
// Every replica weighs every slot for every live id, so the fleet's cost
// per slot grows with the square of its size. FNV-1a is one chain of
// multiplications per id, each waiting for the last; the ids' chains are
// independent, so they go through the slot's bytes together, a group at a
// time, four in registers (fnv1a4), and the processor overlaps them
// (BenchmarkPreferred: 12 ids, 310 → 110 ns a slot).
func (s *Scheduler) preferred(slot lock.Slot) bool {
	_, mine := s.claimant(slot)
	return mine
}

// claimant is slot's preferred claimant (see preferred), and whether it is
// this replica; "" and true if there is no live set to choose from.
func (s *Scheduler) claimant(slot lock.Slot) (by string, mine bool) {
	p := s.live.Load()
	if p == nil || len(*p) == 0 {
		return "", true
	}
	ids := *p
	best, bestW := "", uint64(0)
	for from := 0; from < len(ids); from += 4 {
		group := ids[from:min(from+4, len(ids))]
		var hs [4]uint64
		for i, x := range group {
			hs[i] = x.prefix
		}
		hs[0], hs[1], hs[2], hs[3] = fnv1a4(hs, slot.Task, ":", slot.ID)
		for i, x := range group {
			if w := mix(hs[i]); best == "" || w > bestW {
				best, bestW = x.id, w
			}
		}
	}
	return best, best == s.replica
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// fnv1a continues FNV-1a's state h over parts.
func fnv1a(h uint64, parts ...string) uint64 {
	for _, part := range parts {
		for i := 0; i < len(part); i++ {
			h ^= uint64(part[i])
			h *= fnvPrime
		}
	}
	return h
}

// fnv1a4 continues each of four FNV-1a states over the same parts: what
// fnv1a does to each, the four chains interleaved byte by byte.
func fnv1a4(hs [4]uint64, parts ...string) (uint64, uint64, uint64, uint64) {
	h0, h1, h2, h3 := hs[0], hs[1], hs[2], hs[3]
	for _, part := range parts {
		for i := 0; i < len(part); i++ {
			b := uint64(part[i])
			h0 = (h0 ^ b) * fnvPrime
			h1 = (h1 ^ b) * fnvPrime
			h2 = (h2 ^ b) * fnvPrime
			h3 = (h3 ^ b) * fnvPrime
		}
	}
	return h0, h1, h2, h3
}

// mix is splitmix64's finaliser.
func mix(h uint64) uint64 {
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}
