package scheduler

import (
	"context"
	"fmt"
	"time"
)

// presenceTTL is how long this process's claim on its replica id lasts
// without renewal: three clock checks, so that one slow check does not
// drop it, and a crashed process's id frees within 30s by default.
func (s *Scheduler) presenceTTL() time.Duration { return 3 * s.checkEvery }

// announce claims the replica id for this process in the store (see
// lock.Fleet). If another instance holds it, announce watches the claim:
// a live process renews it at its next clock check and the start is
// refused (ErrDuplicateReplica); a crashed one's claim expires within the
// TTL and this process takes the id over. A store that does not answer
// does not stop the start: the clock check announces again, and claims
// fail closed until the store answers.
func (s *Scheduler) announce(ctx context.Context) error {
	if s.fleet == nil {
		return nil
	}
	ttl := s.presenceTTL()
	poll := max(min(time.Second, s.checkEvery/4), 10*time.Millisecond)
	last := time.Duration(-1)
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		p, err := s.fleet.Announce(cctx, s.replica, s.instance, ttl)
		cancel()
		switch {
		case err != nil:
			s.log.Warn("could not announce the replica id; announcing again at the next clock check", "err", err)
			return nil
		case p.Other == "":
			s.setLive(p.Live)
			return nil
		case last >= 0 && p.TTL > last:
			// Renewed since the last look: its process is alive. A Redlock
			// node that had lost the id may have granted it to this
			// process: give that back.
			s.withdraw(ctx)
			return fmt.Errorf("%w: replica id %q is held by instance %s, which renews it: "+
				"give each daemon its own [daemon] replica (or leave it unset for <hostname>-<pid>)",
				ErrDuplicateReplica, s.replica, p.Other)
		case last < 0:
			s.log.Warn("replica id held by another instance; waiting to see whether it is alive",
				"other_instance", p.Other, "ttl", p.TTL)
		}
		last = p.TTL
		t := s.clock.NewTimer(min(poll, p.TTL+time.Millisecond))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C():
		}
	}
}

// renewPresence renews this process's claim on its replica id and reads
// the live set, from the clock check and whenever the store says the set
// changed (see watchFleet). Another instance holding the id
// means two live processes run with one id: their claims cannot interfere
// (each is owned by its own instance), but the operator must fix it.
func (s *Scheduler) renewPresence(ctx context.Context) {
	if s.fleet == nil || !s.announced {
		return
	}
	p, err := s.fleet.Announce(ctx, s.replica, s.instance, s.presenceTTL())
	switch {
	case err != nil:
		s.log.Warn("could not renew the replica id's presence", "err", err)
	case p.Other != "":
		s.log.Error("another live process runs with this replica id: give each daemon its own [daemon] replica",
			"other_instance", p.Other)
	default:
		s.setLive(p.Live)
	}
}

// renewStarted renews the fleet's first-start record, from the clock
// check.
func (s *Scheduler) renewStarted(ctx context.Context) {
	if s.fleet == nil || !s.announced {
		return
	}
	if _, err := s.fleet.Started(ctx, s.now()); err != nil {
		s.log.Warn("could not renew the fleet's first-start record", "err", err)
	}
}

// withdraw gives the replica id up at shutdown and leaves the fleet's live
// set, so that a restart need not wait for its TTL and peers stop deferring
// to this replica's preferred slots as soon as they hear of it. Best
// effort: the store does both only while this instance holds the id, so
// a restarted process with the same id, which has announced meanwhile,
// stays live.
func (s *Scheduler) withdraw(ctx context.Context) {
	if s.fleet == nil {
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := s.fleet.Withdraw(cctx, s.replica, s.instance); err != nil {
		s.log.Warn("could not withdraw the replica id; it frees when its TTL runs out", "err", err, "ttl", s.presenceTTL())
	}
}

// started records the fleet's first start, if none is recorded yet:
// status reports slots from before it as never scheduled.
func (s *Scheduler) started(ctx context.Context) {
	if s.fleet == nil {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	t, err := s.fleet.Started(cctx, s.now())
	if err != nil {
		s.log.Warn("could not record the fleet's first start; the clock check tries again", "err", err)
		return
	}
	s.firstStart = t
}

// catchUp reports whether a replica starting at now catches up slot, the
// latest slot of t, whose window is open: only if the slot opened within
// the task's catchup_limit. A slot from long before (a leap-day task's
// last 29 February, an @every of centuries anchored at 1970) is not run.
//
// The fleet's first start does not bound catch-up: a fresh fleet started
// at 14:20 should still run an hourly task's 14:00 slot, as catchup =
// "latest" promises. It only tells status that older slots were never
// scheduled (internal/observe).
func (s *Scheduler) catchUp(t *Task, slot, now time.Time) bool {
	if t.CatchupLimit > 0 && now.Sub(slot) > t.CatchupLimit {
		s.log.Info("not catching up a slot older than catchup_limit", "task", t.Name,
			"slot", t.Schedule.SlotID(slot), "catchup_limit", t.CatchupLimit)
		return false
	}
	return true
}

// watchFleet reads the live set again each time the store says it changed
// (a replica joined, left, or was found expired), until ctx ends. The live
// set decides each slot's preferred claimant: read only at the clock check
// (every 10 s), a replica that had just joined and its peers each took
// themselves for the preferred claimant of its share of slots for that
// long, and claimed those slots twice.
func (s *Scheduler) watchFleet(ctx context.Context) {
	if s.fleet == nil {
		return
	}
	changed := make(chan struct{}, 1)
	stop := s.fleet.OnFleetChange(func() {
		select {
		case changed <- struct{}{}:
		default: // a read is due already
		}
	})
	defer stop()
	// A change between announce's read of the set and this registration
	// told no one here: a peer started with this replica announced then,
	// and each would take itself for the preferred claimant of the other's
	// share until the next clock check. Read the set once more now (unless
	// a notice since the registration has asked for a read already).
	select {
	case changed <- struct{}{}:
	default:
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
			if ctx.Err() != nil {
				return
			}
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			s.renewPresence(cctx)
			cancel()
		}
	}
}
