package scheduler

import (
	"context"
	"log/slog"
	"time"

	"github.com/slotd/slotd/internal/stats"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/tasks"
)

// On_failure hooks. A slot that ends without a success — exhausted (its
// last allowed attempt failed) or missed (its window closed first) — runs
// its task's hook once, on one replica of the fleet: the first whose
// lock.Oncer.Once sets the slot's "failure" marker (TTL: the task's
// done_ttl, which outlasts the window). Every replica that sees the end
// tries; the marker lets one through. The hook's failure is logged and
// counted, never retried; a timeout bounds it; an error from the store
// means it does not run (at most once, not at least once).
//
// Who sees the end: the replica whose own last attempt failed (it has the
// error at hand, and goes at once); a replica whose claim finds the slot
// exhausted (the holder may have crashed), which first waits a lease so
// that a live holder goes first; a replica that sees the window close
// without a success, which first reads the slot's state, since a peer may
// have run it (done, or still running: then no hook).

// onceFailure is the event name of the marker.
const onceFailure = "failure"

// onceTimeout bounds the store's calls made for a hook.
const onceTimeout = 5 * time.Second

// slotEnd is a slot that ended without a success, as the loop saw it.
type slotEnd struct {
	t        *Task
	slot     lock.Slot
	kind     string // tasks.FailureExhausted or tasks.FailureMissed
	reason   string // tasks.ReasonCapacity, ReasonBackoff or ReasonQueue, or "" when none is known
	attempt  int    // the last attempt's number, if known (0: read the store)
	attempts int    // attempts made in this run of the slot (since its last rerun)
	// own is this replica's entry of the slot's last attempt; nil when
	// another replica ran it, or none did.
	own *HistoryEntry
}

// hookWaitsPerHook and maxHookWaits bound the slot ends on their way to
// a hook (waiting a lease, or reading the store, before max_hooks applies):
// under a store outage every hooked task's slots end missed, each one a
// goroutine that waits up to a lease, and a fleet of one-second tasks
// would pile up thousands. 64 per max_hooks (512 by default), at most
// 65,536.
const (
	hookWaitsPerHook = 64
	maxHookWaits     = 1 << 16
)

// failed starts e's hook, if its task has one, on a goroutine the loop
// waits for at shutdown; beyond the slot ends already on their way to a
// hook (hookWaits) it is dropped, as one beyond max_hooks is.
func (l *loop) failed(e slotEnd) {
	if e.t.OnFailure == nil {
		return
	}
	select {
	case l.s.hookWaits <- struct{}{}:
	default:
		l.s.stats.Notifications.Add(stats.NotifyDropped)
		l.s.log.Warn("on_failure hook dropped: too many slot ends already on their way to a hook here; left to a peer",
			"task", e.t.Name, "slot", e.slot.ID, "failure", e.kind, "waiting", cap(l.s.hookWaits))
		return
	}
	l.workers.Add(1)
	go func() {
		defer l.workers.Done()
		defer func() { <-l.s.hookWaits }()
		l.s.notify(l.hard, e)
	}()
}

// runFailed passes e, the end of r's slot, to failed, once per run: a
// settled run that claims again (a late release notice reads as a rerun)
// and finds the slot exhausted again has reported it already.
func (l *loop) runFailed(r *run, e slotEnd) {
	if r.reported {
		return
	}
	r.reported = true
	e.t, e.slot = r.t, r.slot
	l.failed(e)
}

// notify runs e's hook if this replica is the one that should.
func (s *Scheduler) notify(ctx context.Context, e slotEnd) {
	log := s.log.With("task", e.t.Name, "slot", e.slot.ID, "failure", e.kind)
	counts := &s.stats.Notifications
	o, ok := s.store.(lock.Oncer)
	if !ok {
		counts.Add(stats.NotifyUnsupported)
		log.Warn("on_failure hook not run: the store has no once marker, so no replica can be sure to be the only one")
		return
	}
	if e.own == nil && !s.confirm(ctx, &e, log) {
		return
	}
	if ctx.Err() != nil {
		// Shutting down, past the grace: the marker is not set, so a peer
		// that finds the slot exhausted or missed runs the hook instead.
		log.Info("on_failure hook left to a peer: shutting down")
		return
	}
	// At most max_hooks at once: twenty failing tasks with a slow hook
	// must not grow into hundreds of processes. Taken before the marker,
	// so that a hook dropped here stays a peer's to run.
	select {
	case s.hooks <- struct{}{}:
		defer func() { <-s.hooks }()
	default:
		counts.Add(stats.NotifyDropped)
		log.Warn("on_failure hook dropped: this replica already runs max_hooks hooks; left to a peer", "max_hooks", cap(s.hooks))
		return
	}
	octx, cancel := context.WithTimeout(ctx, onceTimeout)
	first, err := o.Once(octx, e.slot, onceFailure, s.owner, e.t.DoneTTL)
	cancel()
	s.noteWrite("once", err)
	if err != nil {
		counts.Add(stats.NotifyError)
		log.Error("on_failure hook not run: could not tell whether a peer ran it", "err", err)
		return
	}
	if !first {
		log.Debug("on_failure hook already run by a peer")
		return
	}
	f := tasks.Failure{
		Kind: e.kind, Reason: e.reason, Task: e.t.Name, Slot: e.slot.ID, SlotTime: e.slot.Time,
		Attempts: e.attempts, Replica: s.replica,
	}
	last := e.own
	if last == nil {
		last = s.lastEntry(ctx, e.t.Name, e.slot.ID)
	}
	// e.attempt is the store's count (a trigger's from lock.TriggerBase),
	// which makes the token; the hook sees the attempt 1-based, as the
	// history has it.
	run := tasks.Run{Task: e.t.Name, Slot: e.slot.ID, SlotTime: e.slot.Time, Attempt: e.slot.ShownAttempt(e.attempt), Replica: s.replica}
	if e.attempt > 0 {
		run.Token = lock.Token(e.slot.Time, e.attempt)
	}
	if last != nil {
		f.LastError, f.Output = last.Error, last.Output
		if last.Attempt > run.Attempt {
			run.Attempt, run.Token = last.Attempt, last.Token
		}
	}
	h := e.t.OnFailure
	hctx, cancel := context.WithTimeout(tasks.WithFailure(tasks.WithRun(ctx, run), f), h.Timeout)
	defer cancel()
	start := time.Now()
	err = runTask(hctx, h.Job)
	if err == nil && hctx.Err() != nil {
		err = context.Cause(hctx)
	}
	if err != nil {
		counts.Add(stats.NotifyFailure)
		log.Error("on_failure hook failed; not retried", "plugin", h.Plugin, "err", err,
			"duration", time.Since(start), "timeout", h.Timeout)
		return
	}
	counts.Add(stats.NotifySuccess)
	log.Info("on_failure hook ran", "plugin", h.Plugin, "attempts", f.Attempts, "duration", time.Since(start))
}

// confirm decides, on a replica that did not run e's last attempt, whether
// the slot did end without a success, filling in what the store knows.
// Exhausted: it waits a lease first, so that the holder of the last
// attempt, if alive, notifies with its own error. Missed: the state must
// be neither done nor running, and attempts at the cap make it exhausted.
func (s *Scheduler) confirm(ctx context.Context, e *slotEnd, log *slog.Logger) bool {
	if e.kind == tasks.FailureExhausted {
		wait := s.clock.NewTimer(e.t.Lease)
		defer wait.Stop()
		select {
		case <-wait.C():
			return true
		case <-ctx.Done():
			return false
		}
	}
	rctx, cancel := context.WithTimeout(ctx, onceTimeout)
	defer cancel()
	st, err := lock.ReadState(rctx, s.store, e.slot)
	if err != nil && st.Status != "foreign" {
		s.stats.Notifications.Add(stats.NotifyError)
		log.Error("on_failure hook not run: could not read the slot's state", "err", err)
		return false
	}
	switch st.Status {
	case "done", "running":
		return false // a peer ran it, or runs it still and will report its end
	}
	e.attempts = st.Attempts
	if st.Attempts >= e.t.MaxAttempts {
		e.kind = tasks.FailureExhausted
	}
	return true
}

// lastEntry is the newest history entry of task's slot id, or nil.
func (s *Scheduler) lastEntry(ctx context.Context, task, slotID string) *HistoryEntry {
	if s.hist == nil {
		return nil
	}
	hctx, cancel := context.WithTimeout(ctx, historyTimeout)
	defer cancel()
	recent, err := s.hist.Recent(hctx, task, 50)
	if err != nil {
		s.log.Warn("on_failure hook: the last attempt's error is unknown: history unreadable", "task", task, "slot", slotID, "err", err)
		return nil
	}
	for i := range recent {
		if recent[i].Slot == slotID {
			return &recent[i]
		}
	}
	return nil
}
