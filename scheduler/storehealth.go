package scheduler

import (
	"context"
	"time"

	"github.com/slotd/slotd/internal/stats"
	"github.com/slotd/slotd/lock"
)

// A store that answers TIME may still refuse every write (maxmemory
// reached, an ACL without the prefix, a read-only replica): the replica
// then claims nothing, and must not call itself ready. Two signals say
// so: the write probe made with each clock check, and the last claim,
// renewal, completion or release. A write's refusal stands for
// refusalFor (3 clock checks) unless a write succeeds meanwhile: claims
// refused within an open slot window are retried every few seconds and
// keep it fresh, and once no slot is left to claim, the probe alone
// decides.

// refusalFor is how long a write's refusal keeps the replica unready
// without a newer one.
func (s *Scheduler) refusalFor() time.Duration { return 3 * s.checkEvery }

// probeTTL is the TTL of the probe key: it outlives the next probe.
func (s *Scheduler) probeTTL() time.Duration { return max(3*s.checkEvery, time.Second) }

// noteWrite records the result of a write to the store (op: claim, renew,
// complete, release), and logs the fix when the store starts or stops
// refusing writes.
func (s *Scheduler) noteWrite(op string, err error) {
	if prev, changed := s.stats.Store.Wrote(op, err, s.clock.Now()); changed {
		s.logRefusal(prev, s.stats.Store.LastWrite())
	}
}

// probe writes the probe key, if the store can be probed, and records
// the result.
func (s *Scheduler) probe(ctx context.Context) {
	p, ok := s.store.(lock.Prober)
	if !ok {
		return
	}
	s.noteProbe(p.Probe(ctx, s.replica, s.probeTTL()))
}

// noteProbe records the result of a probe, and logs the fix when the
// store starts or stops refusing writes.
func (s *Scheduler) noteProbe(err error) {
	if prev, changed := s.stats.Store.Probed(err, s.clock.Now()); changed {
		s.logRefusal(prev, s.stats.Store.LastProbe())
	}
}

// logRefusal logs a change from prev to cur that starts or ends a
// refusal of writes, with the fix.
func (s *Scheduler) logRefusal(prev, cur stats.StoreCall) {
	switch {
	case cur.Kind.Refusal():
		s.log.Error("the store refuses writes: "+cur.Store+" "+cur.Code+" — "+cur.Fix+"; slotd cannot claim",
			"store", cur.Store, "kind", cur.Kind.String(), "op", cur.Op, "err", cur.Err)
	case prev.Kind.Refusal() && cur.Kind == lock.KindNone:
		s.log.Info("the store takes writes again", "store", prev.Store, "was", prev.Kind.String(), "op", cur.Op)
	}
}

// Refused returns the store's refusal of writes now in force, if any: the
// last probe's, or the last write's within refusalFor. While it holds the
// replica is not ready: it cannot claim.
func (s *Scheduler) Refused() (stats.StoreCall, bool) {
	if p := s.stats.Store.LastProbe(); p.Kind.Refusal() {
		return p, true
	}
	if w := s.stats.Store.LastWrite(); w.Kind.Refusal() && s.clock.Now().Sub(w.At) < s.refusalFor() {
		return w, true
	}
	return stats.StoreCall{}, false
}
