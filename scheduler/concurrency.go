package scheduler

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/slotd/slotd/internal/stats"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/tasks"
)

// ErrSuperseded is the cause of a task's context when a newer slot of its
// task replaced it (concurrency = "replace"); its slot is then marked done.
var ErrSuperseded = errors.New("scheduler: superseded by a newer slot of the task")

// ErrRecordLost is the cause of a task's context when its running record
// (forbid, replace, queue) was not renewed in time: no renewal of it was
// confirmed within lease − margin of the last one's send, as a lease is
// lost. Another slot of the task may take the record once it runs out, so
// the task must stop before then; its slot is released for a retry.
var ErrRecordLost = errors.New("scheduler: running record lost: no renewal of the task's running record confirmed within the lease")

// supersedePoll is how often a replacing attempt looks whether the attempt
// it replaced has stopped.
const supersedePoll = 50 * time.Millisecond

// occupancy is an attempt's record as its task's running one (forbid,
// replace, queue). It has no loop of its own: the lease's watchdog renews
// it with each renewal of the slot (attempt.hold), and the task's notice —
// a newer slot replacing this one — brings that renewal forward
// (lock.Lease.RenewSoon).
//
// It is kept as the lease is (lock.Lease): valid until ttl − margin after
// the send time of the last Occupy or RenewOccupancy the store confirmed,
// on the monotonic clock. A timer, reset by each confirmed renewal, cancels
// the task with ErrRecordLost at that instant: a holder whose record
// renewals fail while its slot's pass stops before the record can run out
// and another slot of its task start (model/controls.pml R1, R2).
type occupancy struct {
	replace bool
	cancel  context.CancelCauseFunc // cancels the task, with ErrSuperseded or ErrRecordLost
	w       *lock.Watch             // the task's notices
	valid   time.Duration           // ttl − margin
	expiry  *time.Timer             // fires at validUntil; reset by each confirmed renewal

	mu   sync.Mutex // a renewal, the expiry and the vacating never overlap
	sent time.Time  // send time of the last confirmed Occupy or RenewOccupancy
	over bool       // vacated, replaced or lost: renew no more
}

// validUntil is the end of the record as far as this process can prove
// it; mu is held.
func (rec *occupancy) validUntil() time.Time { return rec.sent.Add(rec.valid) }

// occupy applies the task's concurrency policy to the attempt, before its
// task starts: the attempt is recorded in the store as the one running
// its task (lock.Controls.Occupy), taken after the slot's own claim, on a
// key of the task's own.
//
// Two steps on two keys are safe because the slot's claim alone decides
// who may run the slot (§1 holds whatever the record says), and the
// record only decides whether a slot won runs beside another slot of its
// task: each record is written by one script that compares first, carries
// the holder's lease as its TTL (so a crashed holder's record ends with
// its lease), and is renewed with it, by the lease's watchdog.
//
// It returns busy if the task forbids overlap and another slot's attempt
// runs (the caller skips the slot), or under queue if the slot cannot wait
// or waited past its window (a.skip says which: see queue). With replace, another slot's attempt
// is cancelled (its holder's renewal fails, woken by the notice) and
// occupy waits, up to a lease, until that slot is no longer running.
// cancel cancels the task: it is called with ErrSuperseded if a newer
// slot replaces this one. An error: the store did not answer, and the
// task must not run. A record taken is given up by vacate.
func (a *attempt) occupy(cancel context.CancelCauseFunc) (busy *lock.Occupancy, err error) {
	s, t := a.s, a.t
	if s.controls == nil || t.Concurrency == ConcurrencyAllow {
		return nil, nil
	}
	ctx := a.lease.Context()
	replace := t.Concurrency == ConcurrencyReplace
	w := s.controls.WatchTask(t.Name)
	var o lock.Occupancy
	var sent time.Time // the taking Occupy's send time
	if t.Concurrency == ConcurrencyQueue {
		o, sent, err = a.queue(ctx)
	} else {
		cctx, ccancel := context.WithTimeout(ctx, t.Lease/3)
		sent = time.Now()
		o, err = s.controls.Occupy(cctx, a.slot, a.lease.Owner(), t.Lease, replace)
		ccancel()
	}
	if err != nil {
		w.Stop()
		return nil, err
	}
	if !o.Taken {
		w.Stop()
		return &o, nil
	}
	// The record is the watchdog's to renew from here, the await
	// included: an await can outlast the record's TTL, and a slot that
	// replaces this one meanwhile must cancel it (model/controls.pml R3:
	// without this, two slots' attempts replacing each other awaited each
	// other out, their records ran out, and each cancelled itself as
	// superseded). Cancelled, the attempt still awaits the end of the
	// slot it replaced, and its task does not start (execute): its own
	// slot reads running until then, so the slot that replaced it awaits
	// that one too.
	a.keepRecord(&occupancy{replace: replace, cancel: cancel, w: w, sent: sent,
		valid: t.Lease - a.lease.Margin()})
	w.OnChange(func(c lock.Change) {
		if c == lock.Released {
			a.lease.RenewSoon()
		}
	})
	select { // a notice that came before OnChange
	case <-w.C():
		a.lease.RenewSoon()
	default:
	}
	if replace && o.Other != "" {
		// Other is the slot this one replaced now, or one that an
		// earlier Occupy of this slot replaced (its reply lost, or this
		// slot's previous attempt): it may still be stopping.
		a.log().Info("awaiting the replaced slot's stop", "replaced_slot", o.Other, "replaced", o.Value)
		s.awaitStopped(ctx, t, lock.Slot{Task: t.Name, ID: o.Other})
	}
	return nil, nil
}

// waitingTask is the task under which the slot waiting for its task's
// running one is recorded (concurrency = "queue"): an occupancy record of
// its own, under a name no task can have ('~' is not allowed in one), so
// that at most one slot of the task waits, fleet-wide, with the existing
// Controls and no new store record.
func waitingTask(task string) string { return task + "~waiting" }

// queue takes the task's running record under concurrency = "queue",
// waiting for the task's running slot to end if there is one: Temporal's
// BufferOne. The slot first takes the task's waiting record, the queue's
// one place: if another slot holds it, the slot does not wait (a.skip =
// queue_full). Every slot passes through it, even when the task is idle,
// so that a slot that fires just as the running one ends cannot take the
// running record ahead of the slot that waited for it. Holding the waiting
// record, it takes the running one, or else looks whether it is free every
// supersedePoll, renewing its waiting record every third of a lease (a
// waiter that crashes leaves one that ends with its lease), and gives up
// when its slot's window closes (a.skip = tasks.ReasonQueue: missed). The waiting
// record is given up once the running one is taken or the wait ends. An
// answer not Taken: the slot is skipped, for a.skip. An error: the store
// did not answer. sent is the send time of the Occupy that took the
// running record.
func (a *attempt) queue(ctx context.Context) (lock.Occupancy, time.Time, error) {
	s, t, owner := a.s, a.t, a.lease.Owner()
	waiting := lock.Slot{Task: waitingTask(t.Name), ID: a.slot.ID, Time: a.slot.Time, Deadline: a.slot.Deadline}
	cctx, ccancel := context.WithTimeout(ctx, t.Lease/3)
	wo, err := s.controls.Occupy(cctx, waiting, owner, t.Lease, false)
	ccancel()
	if err != nil {
		return lock.Occupancy{}, time.Time{}, err
	}
	if !wo.Taken {
		a.skip = stats.SkipQueueFull
		return wo, time.Time{}, nil
	}
	defer func() {
		vctx, vcancel := context.WithTimeout(context.WithoutCancel(ctx), t.Lease/3)
		defer vcancel()
		if err := s.controls.Vacate(vctx, waiting, owner); err != nil {
			a.log().Warn("could not remove the task's waiting record; it ends with its lease", "err", err)
		}
	}()
	cctx, ccancel = context.WithTimeout(ctx, t.Lease/3)
	sent := time.Now()
	busy, err := s.controls.Occupy(cctx, a.slot, owner, t.Lease, false)
	ccancel()
	if err != nil || busy.Taken {
		return busy, sent, err
	}
	a.log().Info("waiting for the task's running slot to end (concurrency = queue)", "running_slot", busy.Other)
	a.st.Waiting.Add(1)
	defer a.st.Waiting.Add(-1)
	id := a.slot.ID
	a.st.WaitingSlot.Store(&id)
	defer a.st.WaitingSlot.CompareAndSwap(&id, nil)
	renewed := s.clock.Now()
	for {
		timer := s.clock.NewTimer(supersedePoll)
		select {
		case <-ctx.Done():
			timer.Stop()
			return lock.Occupancy{}, time.Time{}, context.Cause(ctx)
		case <-timer.C():
		}
		now := s.clock.Now()
		if !now.Before(a.slot.Deadline) {
			a.skip = tasks.ReasonQueue
			return busy, time.Time{}, nil
		}
		cctx, ccancel := context.WithTimeout(ctx, t.Lease/3)
		if now.Sub(renewed) >= t.Lease/3 {
			if err := s.controls.RenewOccupancy(cctx, waiting, owner, t.Lease); err != nil {
				a.log().Warn("could not renew the task's waiting record", "err", err)
			}
			renewed = now
		}
		sent := time.Now()
		o, err := s.controls.Occupy(cctx, a.slot, owner, t.Lease, false)
		ccancel()
		if err != nil {
			return lock.Occupancy{}, time.Time{}, err
		}
		if o.Taken {
			a.log().Info("the task's running slot ended: the waiting slot starts", "waited", now.Sub(a.slot.Time))
			return o, sent, nil
		}
		busy = o
	}
}

// keepRecord hands the running record rec, just taken, to the lease's
// watchdog, and sets its expiry; a record whose Occupy reply came too late
// to leave any validity is lost at once, before the task starts.
func (a *attempt) keepRecord(rec *occupancy) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	a.rec.Store(rec)
	rec.expiry = time.AfterFunc(time.Until(rec.validUntil()), func() { a.recordExpired(rec) })
}

// recordExpired cancels the task if its record's validity has passed
// with no renewal confirmed (the timer may fire just as one moved it),
// unless the lease's end cancelled it first (a lost lease: its cause
// stands).
func (a *attempt) recordExpired(rec *occupancy) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.over || time.Now().Before(rec.validUntil()) || a.lease.Context().Err() != nil {
		return
	}
	a.loseRecord(rec, ErrRecordLost)
}

// loseRecord cancels the task because its record is no longer provably
// its own (why wraps ErrRecordLost); rec.mu is held. Another slot may
// start once the record runs out, within the margin: the task stops at
// once, with no grace (tasks.ErrNoGrace), as on a lost lease; its
// attempt ends with outcome record_lost (slotd_runs_total, the history).
func (a *attempt) loseRecord(rec *occupancy, why error) {
	rec.over = true
	rec.expiry.Stop()
	a.log().Error("running record lost: cancelling the task", "err", why, "concurrency", a.t.Concurrency)
	rec.cancel(fmt.Errorf("%w (%w)", why, tasks.ErrNoGrace))
}

// renewRecord renews the attempt's running record, if it holds one; the
// lease's watchdog calls it after each renewal of the slot. A renewal
// confirmed moves the record's validity (occupancy); one not confirmed
// leaves it to expire. A record replaced by a newer slot cancels the task
// (ErrSuperseded); one found gone under forbid or queue cancels it as
// lost: it ran out, and another slot may have started.
func (a *attempt) renewRecord() {
	rec := a.rec.Load()
	if rec == nil {
		return
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.over {
		return
	}
	s, t, owner := a.s, a.t, a.lease.Owner()
	sent, until := time.Now(), rec.validUntil()
	if !sent.Before(until) {
		a.loseRecord(rec, ErrRecordLost)
		return
	}
	// A renewal confirmed after the validity proves nothing of the time
	// between: it is bounded by it, as the lease's are.
	deadline := sent.Add(t.Lease / 3)
	if until.Before(deadline) {
		deadline = until
	}
	rctx, rcancel := context.WithDeadline(a.lease.Context(), deadline)
	defer rcancel()
	err := s.controls.RenewOccupancy(rctx, a.slot, owner, t.Lease)
	switch {
	case err == nil:
		rec.sent = sent
		rec.expiry.Reset(time.Until(rec.validUntil()))
	case errors.Is(err, lock.ErrNotHeld) && rec.replace:
		a.log().Warn("a newer slot replaced this attempt: cancelling the task")
		rec.over = true
		rec.expiry.Stop()
		rec.cancel(ErrSuperseded)
	case errors.Is(err, lock.ErrNotHeld):
		a.loseRecord(rec, fmt.Errorf("%w: the store no longer has it", ErrRecordLost))
	default:
		a.log().Warn("could not renew the task's running record; it is lost if no renewal is confirmed by its validity",
			"err", err, "valid_until", until)
	}
}

// vacate gives the attempt's running record up once its task has ended:
// no renewal after this, and the record is removed if it is still the
// attempt's.
func (a *attempt) vacate() {
	rec := a.rec.Load()
	if rec == nil {
		return
	}
	rec.mu.Lock()
	rec.over = true
	rec.expiry.Stop()
	rec.mu.Unlock()
	rec.w.Stop()
	vctx, vcancel := context.WithTimeout(context.WithoutCancel(a.lease.Context()), a.t.Lease)
	defer vcancel()
	if err := a.s.controls.Vacate(vctx, a.slot, a.lease.Owner()); err != nil {
		a.log().Warn("could not remove the task's running record; it ends with its lease", "err", err)
	}
}

// awaitStopped waits until slot is no longer running (its holder has
// marked it done or released it, or its lease ran out), for at most a
// lease and a poll, or until ctx ends.
func (s *Scheduler) awaitStopped(ctx context.Context, t *Task, slot lock.Slot) {
	until := s.clock.Now().Add(t.Lease + supersedePoll)
	for s.clock.Now().Before(until) {
		rctx, cancel := context.WithTimeout(ctx, t.Lease/3)
		st, err := lock.ReadState(rctx, s.store, slot)
		cancel()
		if err == nil && st.Status != "running" {
			return
		}
		timer := s.clock.NewTimer(supersedePoll)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C():
		}
	}
}
