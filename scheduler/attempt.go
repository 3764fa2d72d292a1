package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/slotd/slotd/internal/stats"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/scheduler/history"
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
		a := l.s.newAttempt(t, slot, c)
		a.backfill = r.backfill
		finished, failed := a.run(l.ctx, l.hard)
		l.inbox.post(event{kind: attempted, run: r, reply: lock.ClaimReply{Claim: c}, done: finished, entry: failed})
	}()
}

// attempt is one won claim on its way through its phases, one method
// each, which run drives in order:
//
//	hold     the lease, whose one watchdog also renews the task's running record
//	occupy   the task's running record, under forbid and replace (concurrency.go)
//	execute  the task, under the lease's context and its timeout
//	finish   on success (or superseded) complete, on failure release; then the history
type attempt struct {
	s     *Scheduler
	t     *Task
	slot  lock.Slot
	claim lock.Claim
	st    *stats.Task
	// logger is scoped to the attempt, made on first use (log): a JSON
	// handler formats the four attributes at once, a burst makes ten
	// thousand of these, and at level warn most attempts log nothing.
	logger atomic.Pointer[slog.Logger]
	lease  *lock.Lease
	// cancelTask cancels the task's context; following: the lease's loss
	// still cancels it (see run).
	cancelTask context.CancelCauseFunc
	following  atomic.Bool
	// rec is the task's running record once occupy took it (forbid,
	// replace); the lease's watchdog reads it to renew it.
	rec atomic.Pointer[occupancy]
	// skip is why occupy answered busy under concurrency = "queue":
	// stats.SkipQueueFull, or tasks.ReasonQueue when the slot's window
	// closed while it waited (missed, not skipped); "" under forbid.
	skip string
	// backfill: an operator's backfill started the slot; its history
	// entries say so.
	backfill bool
}

// shown is the attempt's number as the task, its history and the pages see
// it: 1-based on triggered slots too, whose tokens keep the claim's number.
func (a *attempt) shown() int { return a.slot.ShownAttempt(a.claim.Attempt) }

func (s *Scheduler) newAttempt(t *Task, slot lock.Slot, c lock.Claim) *attempt {
	return &attempt{s: s, t: t, slot: slot, claim: c, st: s.stats.Task(t.Name)}
}

// log is the attempt's logger. The lease's watchdog logs too: two first
// uses at once may both make one, and one is kept.
func (a *attempt) log() *slog.Logger {
	if l := a.logger.Load(); l != nil {
		return l
	}
	l := a.s.log.With("task", a.t.Name, "slot", a.slot.ID, "attempt", a.shown(), "token", lock.Token(a.slot.Time, a.claim.Attempt))
	if !a.logger.CompareAndSwap(nil, l) {
		return a.logger.Load()
	}
	return l
}

// run runs the attempt through its phases. It reports whether this
// replica is finished with the slot: the task succeeded — even if the slot
// could not then be marked done, since running it again here would only
// add a duplicate (a peer may still, after the lease) — and, if the
// attempt failed, its history entry.
func (a *attempt) run(ctx, hard context.Context) (bool, *HistoryEntry) {
	// The task's context ends with the lease's: with hard, its parent, and
	// on a lost lease through the lease's Lost hook (lostLease), whose cause
	// also carries tasks.ErrNoGrace: the slot may be a peer's once the
	// lease's margin runs out, so plugins must stop at once, not after a
	// grace period of their own. (The hook, not a context.AfterFunc on the
	// lease's context: the loss is heard where it is decided, and an
	// attempt costs no watcher of its own.)
	base, cancelBase := context.WithCancelCause(hard)
	defer cancelBase(nil)
	a.cancelTask = cancelBase
	a.following.Store(true)
	a.hold(hard) // a lease lost on arrival cancels base here
	tctx, cancel := context.WithTimeoutCause(base, a.t.Timeout, ErrTimeout)
	defer cancel()
	busy, oerr := a.occupy(cancelBase)
	if busy != nil {
		a.following.Store(false)
		if a.skip == tasks.ReasonQueue {
			return false, a.missQueued(ctx, busy)
		}
		return a.skipForbidden(ctx, busy), nil
	}
	entry, err := a.execute(ctx, tctx, oerr)
	// Completing or releasing the lease ends its context too: stop
	// following it, but let a loss that came first show in tctx now.
	a.following.Store(false)
	if lctx := a.lease.Context(); lctx.Err() != nil {
		a.follow(context.Cause(lctx))
	}
	a.st.Running.Add(-1)
	entry.Duration = a.s.now().Sub(entry.Started)
	a.st.Duration.Observe(entry.Duration.Seconds())
	return a.finish(ctx, hard, tctx, entry, err)
}

// hold starts the lease's watchdog. Each renewal it confirms also renews
// the task's running record, if the attempt holds one: one watchdog for
// both, so the record lives exactly as long as the lease is kept.
func (a *attempt) hold(hard context.Context) {
	s, st := a.s, a.st
	a.lease = lock.Hold(hard, s.store, a.slot, s.owner, a.claim, a.t.Lease, lock.LeaseHooks{
		Renewed: func() {
			st.Renewals.Inc()
			s.noteWrite("renew", nil)
			a.renewRecord()
		},
		Failed: func(err error) { s.noteWrite("renew", err) },
		Lost: func(err error) {
			st.LeaseLosses.Inc()
			a.log().Error("lease lost: cancelling the task", "err", err)
			if a.following.Load() {
				a.follow(err)
			}
		},
	})
}

// follow cancels the task's context with the cause the lease's ended
// with, adding tasks.ErrNoGrace to a loss.
func (a *attempt) follow(cause error) {
	if errors.Is(cause, lock.ErrLeaseLost) {
		cause = fmt.Errorf("%w (%w)", cause, tasks.ErrNoGrace)
	}
	a.cancelTask(cause)
}

// execute runs the task under tctx, unless taking the task's running
// record failed (oerr), and then gives the record up. The entry it returns
// has everything but the duration and the outcome.
func (a *attempt) execute(ctx, tctx context.Context, oerr error) (HistoryEntry, error) {
	s, t := a.s, a.t
	start := s.now()
	a.st.StartDelay.Observe(max(start.Sub(a.slot.Time), 0).Seconds())
	a.st.Running.Add(1)
	if s.log.Enabled(ctx, slog.LevelInfo) {
		a.log().Info("attempt started", "delay", start.Sub(a.slot.Time))
	}
	rctx := tasks.WithRun(tctx, tasks.Run{
		Task: t.Name, Slot: a.slot.ID, SlotTime: a.slot.Time, Attempt: a.shown(),
		Token: a.lease.Token(), Replica: s.replica, Revision: a.claim.Revision,
	})
	var out *tasks.Output // nil keeps none
	if t.OutputTail > 0 {
		out = tasks.NewOutput(min(t.OutputTail, history.MaxOutput))
		rctx = tasks.WithOutput(rctx, out)
	}
	var err error
	switch {
	case oerr != nil:
		err = fmt.Errorf("task not started: recording its running attempt (concurrency = %q) failed: %w", t.Concurrency, oerr)
	case tctx.Err() != nil:
		// Replaced, or the lease lost, while it awaited the slot it
		// replaced (occupy): not started.
		err = fmt.Errorf("task not started: %w", context.Cause(tctx))
		a.vacate()
	default:
		err = runTask(rctx, t.Job)
		a.vacate()
	}
	return HistoryEntry{
		Slot: a.slot.ID, SlotTime: a.slot.Time, Attempt: a.shown(), Token: a.lease.Token(),
		Replica: s.replica, Started: start, Output: out.String(), Backfilled: a.backfill,
	}, err
}

// finish ends the attempt by what the task did (err, and tctx's cause):
// superseded or succeeded, the slot is completed; failed, it is released.
// Each path records the history entry.
func (a *attempt) finish(ctx, hard, tctx context.Context, entry HistoryEntry, err error) (bool, *HistoryEntry) {
	switch {
	case errors.Is(context.Cause(tctx), ErrSuperseded):
		a.superseded(ctx, entry)
		return true, nil
	case err == nil && tctx.Err() == nil:
		a.succeeded(ctx, hard, entry)
		return true, nil
	}
	return false, a.failed(ctx, tctx, entry, err)
}

// finishCtx bounds a release or a superseded completion: it must outlive
// shutdown, and the lease bounds it. A success has its own (succeeded).
func (a *attempt) finishCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), a.t.Lease)
}

// superseded marks the slot done: a newer slot of the task runs instead.
func (a *attempt) superseded(ctx context.Context, entry HistoryEntry) {
	fctx, fcancel := a.finishCtx(ctx)
	defer fcancel()
	a.st.Ran(stats.OutcomeSuperseded)
	ferr := a.lease.Complete(fctx, a.t.DoneTTL)
	a.s.noteWrite("complete", ferr)
	if ferr != nil {
		a.st.FinishErrors.Inc()
		a.log().Error("superseded, but the slot could not be marked done", "err", ferr)
	}
	a.log().Info("attempt superseded by a newer slot: slot marked done", "duration", entry.Duration)
	entry.Outcome, entry.Error = stats.OutcomeSuperseded, ErrSuperseded.Error()
	a.s.record(ctx, a.t.Name, entry, a.log)
}

// succeeded marks the slot done. The completion is retried while the
// store may still hold the slot for this attempt (lock.Lease.Complete):
// until the slot's deadline, after which no peer starts an attempt, and
// at least a lease; a shutdown's hard cancel ends it sooner (hard outlives
// ctx's end: it ends after the grace).
func (a *attempt) succeeded(ctx, hard context.Context, entry HistoryEntry) {
	s, st := a.s, a.st
	cctx, ccancel := context.WithTimeout(hard, max(a.slot.Deadline.Sub(s.now()), a.t.Lease))
	defer ccancel()
	entry.Outcome = stats.OutcomeSuccess // what a completion that records its entry appends
	recorded := false
	complete := s.store.Complete
	if rec, ok := s.hist.(completeRecorder); ok {
		complete = func(ctx context.Context, slot lock.Slot, owner lock.Owner, ttl time.Duration) error {
			var err error
			recorded, err = rec.CompleteRecorded(ctx, s.store, slot, owner, ttl, entry)
			return err
		}
	}
	ferr := a.lease.CompleteWith(cctx, a.t.DoneTTL, complete)
	s.noteWrite("complete", ferr)
	if ferr != nil && appliedDone(ferr) {
		// Done, but not confirmed (on Redis: on the master; a failover
		// before the replicas catch up could lose the marker and let a
		// peer run the slot again).
		a.log().Warn("slot marked done, but not acknowledged by min_replicas_ack replicas", "err", ferr)
		ferr = nil
	}
	if ferr != nil {
		// The task ran but the slot is not marked done: a peer may run it
		// again after the lease; the fencing token tells them apart.
		st.Ran(stats.OutcomeSuccessUnmarked)
		st.Succeeded(a.slot.Time)
		st.FinishErrors.Inc()
		a.log().Error("task succeeded but the slot could not be marked done: a peer may run it again", "err", ferr, "duration", entry.Duration)
		entry.Outcome, entry.Error = stats.OutcomeSuccessUnmarked, "task succeeded but the slot could not be marked done: "+ferr.Error()
		s.record(ctx, a.t.Name, entry, a.log)
		return
	}
	st.Ran(stats.OutcomeSuccess)
	st.Succeeded(a.slot.Time)
	if s.log.Enabled(ctx, slog.LevelInfo) {
		a.log().Info("attempt succeeded", "duration", entry.Duration)
	}
	if !recorded {
		s.record(ctx, a.t.Name, entry, a.log)
	}
}

// appliedDone: the store marked the slot done but could not confirm it
// (a lock.StoreError that is Applied). Apart, so that a completion without
// an error pays nothing for the pointer errors.As needs.
func appliedDone(err error) bool {
	se := (*lock.StoreError)(nil)
	return errors.As(err, &se) && se.Applied
}

// failed releases the slot for a peer's retry and returns the entry.
func (a *attempt) failed(ctx, tctx context.Context, entry HistoryEntry, err error) *HistoryEntry {
	outcome := stats.OutcomeFailure
	switch cause := context.Cause(tctx); {
	case errors.Is(cause, lock.ErrLeaseLost):
		outcome = stats.OutcomeLeaseLost
	case errors.Is(cause, ErrRecordLost):
		outcome = stats.OutcomeRecordLost
	case errors.Is(cause, ErrTimeout):
		outcome = stats.OutcomeTimeout
	case errors.Is(cause, ErrShutdown):
		outcome = stats.OutcomeCanceled
	}
	if err == nil {
		err = context.Cause(tctx)
	}
	a.st.Ran(outcome)
	// A shutdown's cancel is no failure of the task's: a peer takes over
	// at once. Any other failure waits out the task's retry backoff.
	var backoff time.Duration
	if outcome != stats.OutcomeCanceled {
		backoff = a.t.RetryDelay(a.slot, a.claim)
	}
	a.log().Warn("attempt failed", "outcome", outcome, "err", err, "duration", entry.Duration)
	if backoff > 0 {
		a.logBackoff(backoff)
	}
	fctx, fcancel := a.finishCtx(ctx)
	defer fcancel()
	rerr := a.lease.ReleaseAfter(fctx, backoff)
	a.s.noteWrite("release", rerr)
	if rerr != nil {
		a.st.FinishErrors.Inc()
		a.log().Error("release failed; the slot frees when its lease runs out", "err", rerr)
	}
	entry.Outcome, entry.Error = outcome, err.Error()
	a.s.record(ctx, a.t.Name, entry, a.log)
	return &entry
}

// logBackoff says when the next attempt may start, by this replica's
// clock (the store's decides), or that none can before the deadline.
func (a *attempt) logBackoff(backoff time.Duration) {
	next := a.s.now().Add(backoff)
	if !next.Before(a.slot.Deadline) {
		a.log().Warn("retry backoff ends at or after the slot's deadline: no further attempt; the slot will be missed (reason backoff)",
			"retry_backoff", backoff, "deadline", a.slot.Deadline)
		return
	}
	a.log().Info("next attempt after the retry backoff, on whichever replica claims it", "retry_backoff", backoff, "not_before", next)
}

// skipForbidden ends the attempt without running its task, because the
// task forbids overlap and busy names the slot that runs: the slot is
// marked done and the skip recorded, once for the fleet.
func (a *attempt) skipForbidden(ctx context.Context, busy *lock.Occupancy) bool {
	s, st := a.s, a.st
	reason, outcome := stats.SkipForbid, stats.OutcomeSkippedForbid
	why := "slot " + busy.Other + " of the task still runs (concurrency = forbid)"
	switch a.skip {
	case stats.SkipQueueFull:
		reason, outcome = a.skip, stats.OutcomeSkippedQueue
		why = "slot " + busy.Other + " of the task already waits for the running one (concurrency = queue: at most one waits)"
	}
	st.Skip(reason)
	fctx, cancel := a.finishCtx(ctx)
	defer cancel()
	err := a.lease.Complete(fctx, a.t.DoneTTL)
	s.noteWrite("complete", err)
	if err != nil {
		st.FinishErrors.Inc()
		a.log().Error("slot skipped, but it could not be marked done", "reason", reason, "err", err)
	}
	a.log().Info("slot skipped: "+why, "reason", reason)
	s.record(ctx, a.t.Name, HistoryEntry{
		Slot: a.slot.ID, SlotTime: a.slot.Time, Attempt: a.shown(), Token: a.lease.Token(), Replica: s.replica,
		Outcome: outcome, Started: s.now(), Backfilled: a.backfill,
		Error: "skipped (" + reason + "): " + why,
	}, a.log)
	return true
}

// missQueued ends the attempt of a slot that waited (concurrency =
// "queue") until its window closed, without running its task: the slot is
// marked done, so that no peer claims it again, and recorded as missed
// with reason queue; the loop counts it and runs the on_failure hook
// (onAttempted), once for the fleet.
func (a *attempt) missQueued(ctx context.Context, busy *lock.Occupancy) *HistoryEntry {
	s := a.s
	why := "the slot's window closed while it waited for slot " + busy.Other + " of the task (concurrency = queue)"
	fctx, cancel := a.finishCtx(ctx)
	defer cancel()
	err := a.lease.Complete(fctx, a.t.DoneTTL)
	s.noteWrite("complete", err)
	if err != nil {
		a.st.FinishErrors.Inc()
		a.log().Error("slot missed while it waited, and it could not be marked done", "err", err)
	}
	a.log().Warn("slot missed: "+why, "reason", tasks.ReasonQueue, "deadline", a.slot.Deadline)
	entry := HistoryEntry{
		Slot: a.slot.ID, SlotTime: a.slot.Time, Attempt: a.shown(), Token: a.lease.Token(), Replica: s.replica,
		Outcome: stats.OutcomeMissedQueue, Started: s.now(), Backfilled: a.backfill,
		Error: "missed (" + tasks.ReasonQueue + "): " + why,
	}
	s.record(ctx, a.t.Name, entry, a.log)
	return &entry
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
