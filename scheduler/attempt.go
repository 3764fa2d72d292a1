package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"

	"github.com/slotd/slotd/internal/stats"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/tasks"
)

// startAttempt runs the attempt of won claim c on its own goroutine, which
// reports back to the loop with an attempted event when the slot is
// completed or released.
func (l *loop) startAttempt(r *run, c lock.Claim) {
	t, slot := r.t, r.slot
	l.attemptStarted()
	l.workers.Add(1)
	go func() {
		defer l.workers.Done()
		finished, failed := l.s.attempt(l.ctx, l.hard, t, slot, c)
		l.inbox.post(event{kind: attempted, run: r, reply: lock.ClaimReply{Claim: c}, done: finished, entry: failed})
	}()
}

// attempt runs a won claim and completes or releases the slot. It reports
// whether this replica is finished with the slot: the task succeeded — even
// if the slot could not then be marked done, since running it again here
// would only add a duplicate (a peer may still, after the lease) — and,
// if the attempt failed, its history entry.
func (s *Scheduler) attempt(ctx, hard context.Context, t *Task, slot lock.Slot, c lock.Claim) (bool, *HistoryEntry) {
	// One With for the attempt's four attributes, made on first use: a JSON
	// handler formats them at once, a burst makes ten thousand of these,
	// and at level warn most attempts log nothing.
	shown := lock.ShownAttempt(slot.ID, c.Attempt) // 1-based on triggered slots too; tokens keep c.Attempt
	log := sync.OnceValue(func() *slog.Logger {
		return s.log.With("task", t.Name, "slot", slot.ID, "attempt", shown, "token", lock.Token(slot.Time, c.Attempt))
	})
	st := s.stats.Task(t.Name)
	lease := lock.Hold(hard, s.store, slot, s.owner, c, t.Lease, lock.LeaseHooks{
		Renewed: func() {
			st.Renewals.Inc()
			s.noteWrite("renew", nil)
		},
		Failed: func(err error) { s.noteWrite("renew", err) },
		Lost: func(err error) {
			st.LeaseLosses.Inc()
			log().Error("lease lost: cancelling the task", "err", err)
		},
	})
	run := tasks.Run{
		Task: t.Name, Slot: slot.ID, SlotTime: slot.Time, Attempt: shown,
		Token: lease.Token(), Replica: s.replica, Revision: c.Revision,
	}
	// The task's context ends with the lease's, and on a lost lease its
	// cause also carries tasks.ErrNoGrace: the slot may be a peer's once the
	// lease's margin runs out, so plugins must stop at once, not after a
	// grace period of their own.
	base, cancelBase := context.WithCancelCause(hard)
	defer cancelBase(nil)
	follow := func() {
		cause := context.Cause(lease.Context())
		if errors.Is(cause, lock.ErrLeaseLost) {
			cause = fmt.Errorf("%w (%w)", cause, tasks.ErrNoGrace)
		}
		cancelBase(cause)
	}
	stopFollowing := context.AfterFunc(lease.Context(), follow)
	tctx, cancel := context.WithTimeoutCause(base, t.Timeout, ErrTimeout)
	defer cancel()
	stopOccupying, busy, oerr := s.occupy(lease.Context(), t, slot, lease.Owner(), cancelBase, log)
	if busy != nil {
		stopFollowing()
		return s.skipForbidden(ctx, t, slot, c, lease, busy, log), nil
	}
	start := s.now()
	st.StartDelay.Observe(max(start.Sub(slot.Time), 0).Seconds())
	st.Running.Add(1)
	if s.log.Enabled(ctx, slog.LevelInfo) {
		log().Info("attempt started", "delay", start.Sub(slot.Time))
	}
	rctx := tasks.WithRun(tctx, run)
	var out *tasks.Output // nil keeps none
	if t.OutputTail > 0 {
		out = tasks.NewOutput(min(t.OutputTail, MaxHistoryOutput))
		rctx = tasks.WithOutput(rctx, out)
	}
	var err error
	if oerr != nil {
		err = fmt.Errorf("task not started: recording its running attempt (concurrency = %q) failed: %w", t.Concurrency, oerr)
	} else {
		err = runTask(rctx, t.Job)
		stopOccupying()
	}
	// Completing or releasing the lease ends its context too: stop
	// following it, but let a loss that came first show in tctx now.
	stopFollowing()
	if lease.Context().Err() != nil {
		follow()
	}
	st.Running.Add(-1)
	took := s.now().Sub(start)
	st.Duration.Observe(took.Seconds())
	entry := HistoryEntry{
		Slot: slot.ID, SlotTime: slot.Time, Attempt: shown, Token: lease.Token(),
		Replica: s.replica, Started: start, Duration: took,
		Output: out.String(),
	}

	// Finishing must outlive shutdown; the lease bounds a release. Made
	// only on the paths that release or supersede: a success has its own.
	finishCtx := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.WithoutCancel(ctx), t.Lease)
	}
	if errors.Is(context.Cause(tctx), ErrSuperseded) {
		fctx, fcancel := finishCtx()
		defer fcancel()
		// Done, superseded: the newer slot runs instead.
		st.Ran(stats.OutcomeSuperseded)
		ferr := lease.Complete(fctx, t.DoneTTL)
		s.noteWrite("complete", ferr)
		if ferr != nil {
			st.FinishErrors.Inc()
			log().Error("superseded, but the slot could not be marked done", "err", ferr)
		}
		log().Info("attempt superseded by a newer slot: slot marked done", "duration", took)
		entry.Outcome, entry.Error = stats.OutcomeSuperseded, ErrSuperseded.Error()
		s.record(ctx, t.Name, entry, log)
		return true, nil
	}
	if err == nil && tctx.Err() == nil {
		// The completion is retried while the lease is held (the watchdog
		// keeps renewing): until the slot's deadline, after which no peer
		// starts an attempt, and at least a lease; a shutdown's hard cancel
		// ends it sooner (hard outlives ctx's end: it ends after the grace).
		cctx, ccancel := context.WithTimeout(hard, max(slot.Deadline.Sub(s.now()), t.Lease))
		defer ccancel()
		ferr := lease.Complete(cctx, t.DoneTTL)
		s.noteWrite("complete", ferr)
		if errors.Is(ferr, lock.ErrNotReplicated) {
			// Done on the master; a failover before the replicas catch up
			// could lose the marker and let a peer run the slot again.
			log().Warn("slot marked done, but not acknowledged by min_replicas_ack replicas", "err", ferr)
			ferr = nil
		}
		if ferr != nil {
			// The task ran but the slot is not marked done: a peer may run it
			// again after the lease; the fencing token tells them apart.
			st.Ran(stats.OutcomeSuccessUnmarked)
			st.Succeeded(slot.Time)
			st.FinishErrors.Inc()
			log().Error("task succeeded but the slot could not be marked done: a peer may run it again", "err", ferr, "duration", took)
			entry.Outcome, entry.Error = stats.OutcomeSuccessUnmarked, "task succeeded but the slot could not be marked done: "+ferr.Error()
			s.record(ctx, t.Name, entry, log)
			return true, nil
		}
		st.Ran(stats.OutcomeSuccess)
		st.Succeeded(slot.Time)
		if s.log.Enabled(ctx, slog.LevelInfo) {
			log().Info("attempt succeeded", "duration", took)
		}
		entry.Outcome = stats.OutcomeSuccess
		s.record(ctx, t.Name, entry, log)
		return true, nil
	}
	outcome := stats.OutcomeFailure
	switch cause := context.Cause(tctx); {
	case errors.Is(cause, lock.ErrLeaseLost):
		outcome = stats.OutcomeLeaseLost
	case errors.Is(cause, ErrTimeout):
		outcome = stats.OutcomeTimeout
	case errors.Is(cause, ErrShutdown):
		outcome = stats.OutcomeCanceled
	}
	if err == nil {
		err = context.Cause(tctx)
	}
	st.Ran(outcome)
	log().Warn("attempt failed", "outcome", outcome, "err", err, "duration", took)
	fctx, fcancel := finishCtx()
	defer fcancel()
	rerr := lease.Release(fctx)
	s.noteWrite("release", rerr)
	if rerr != nil {
		st.FinishErrors.Inc()
		log().Error("release failed; the slot frees when its lease runs out", "err", rerr)
	}
	entry.Outcome, entry.Error = outcome, err.Error()
	s.record(ctx, t.Name, entry, log)
	return false, &entry
}

// skipForbidden ends the won attempt of slot without running its task,
// because t forbids overlap and busy names the slot that runs: the slot is
// marked done and the skip recorded, once for the fleet.
func (s *Scheduler) skipForbidden(ctx context.Context, t *Task, slot lock.Slot, c lock.Claim, lease *lock.Lease,
	busy *lock.Occupancy, log func() *slog.Logger) bool {
	st := s.stats.Task(t.Name)
	st.Skip(stats.SkipForbid)
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.Lease)
	defer cancel()
	err := lease.Complete(fctx, t.DoneTTL)
	s.noteWrite("complete", err)
	if err != nil {
		st.FinishErrors.Inc()
		log().Error("slot skipped (concurrency = forbid), but it could not be marked done", "err", err)
	}
	log().Info("slot skipped: the previous slot of the task still runs (concurrency = forbid)", "running_slot", busy.Other)
	now := s.now()
	s.record(ctx, t.Name, HistoryEntry{
		Slot: slot.ID, SlotTime: slot.Time, Attempt: lock.ShownAttempt(slot.ID, c.Attempt), Token: lease.Token(), Replica: s.replica,
		Outcome: stats.OutcomeSkippedForbid, Started: now,
		Error: "skipped: slot " + busy.Other + " of the task still runs (concurrency = forbid)",
	}, log)
	return true
}

// runTask runs job, turning a panic into an error so that one bad plugin
// cannot take the daemon down.
func runTask(ctx context.Context, job tasks.Task) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("task panicked: %v\n%s", r, debug.Stack())
		}
	}()
	return job.Run(ctx)
}
