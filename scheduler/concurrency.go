package scheduler

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/slotd/slotd/lock"
)

// ErrSuperseded is the cause of a task's context when a newer slot of its
// task replaced it (concurrency = "replace"); its slot is then marked done.
var ErrSuperseded = errors.New("scheduler: superseded by a newer slot of the task")

// supersedePoll is how often a replacing attempt looks whether the attempt
// it replaced has stopped.
const supersedePoll = 50 * time.Millisecond

// occupy applies t's concurrency policy to the attempt of slot that owner
// won, before its task starts: the attempt is recorded in the store as
// the one running its task (lock.Controls.Occupy), taken after the slot's
// own claim, on a key of the task's own.
//
// Two steps on two keys are safe because the slot's claim alone decides
// who may run the slot (§1 holds whatever the record says), and the
// record only decides whether a slot won runs beside another slot of its
// task: each record is written by one script that compares first, carries
// the holder's lease as its TTL (so a crashed holder's record ends with
// its lease), and is renewed alongside it.
//
// It returns busy if t forbids overlap and another slot's attempt runs
// (the caller skips the slot); otherwise stop, which the caller calls when
// the task has ended, to stop renewing the record and remove it. With
// replace, another slot's attempt is cancelled (its holder's renewal
// fails, woken by the notice) and occupy waits, up to a lease, until that
// slot is no longer running. cancel cancels the task: it is called with
// ErrSuperseded if a newer slot replaces this one. An error: the store did
// not answer, and the task must not run.
func (s *Scheduler) occupy(ctx context.Context, t *Task, slot lock.Slot, owner lock.Owner, cancel context.CancelCauseFunc, log func() *slog.Logger) (stop func(), busy *lock.Occupancy, err error) {
	if s.controls == nil || (t.Concurrency != ConcurrencyForbid && t.Concurrency != ConcurrencyReplace) {
		return func() {}, nil, nil
	}
	replace := t.Concurrency == ConcurrencyReplace
	w := s.controls.WatchTask(t.Name)
	cctx, ccancel := context.WithTimeout(ctx, t.Lease/3)
	o, err := s.controls.Occupy(cctx, slot, owner, t.Lease, replace)
	ccancel()
	if err != nil {
		w.Stop()
		return nil, nil, err
	}
	if !o.Taken {
		w.Stop()
		return nil, &o, nil
	}
	if replace && o.Other != "" {
		log().Info("replacing the task's running slot", "replaced_slot", o.Other, "replaced", o.Value)
		s.awaitStopped(ctx, t, lock.Slot{Task: t.Name, ID: o.Other})
	}
	done := make(chan struct{})
	kept := make(chan struct{})
	go func() {
		defer close(kept)
		s.keepOccupancy(ctx, t, slot, owner, replace, w, done, cancel, log)
	}()
	return func() {
		close(done)
		<-kept
		w.Stop()
		vctx, vcancel := context.WithTimeout(context.WithoutCancel(ctx), t.Lease)
		defer vcancel()
		if err := s.controls.Vacate(vctx, slot, owner); err != nil {
			log().Warn("could not remove the task's running record; it ends with its lease", "err", err)
		}
	}, nil, nil
}

// keepOccupancy renews the attempt's running record every lease/3, and at
// once when the task's notice comes, until done or ctx ends. A record
// replaced by a newer slot cancels the task (ErrSuperseded); under forbid
// a record that expired is taken again.
func (s *Scheduler) keepOccupancy(ctx context.Context, t *Task, slot lock.Slot, owner lock.Owner, replace bool,
	w *lock.Watch, done <-chan struct{}, cancel context.CancelCauseFunc, log func() *slog.Logger) {
	every := t.Lease / 3
	for {
		timer := s.clock.NewTimer(every)
		select {
		case <-done:
			timer.Stop()
			return
		case <-ctx.Done():
			timer.Stop()
			return
		case <-w.C():
			timer.Stop()
		case <-timer.C():
		}
		rctx, rcancel := context.WithTimeout(ctx, every)
		err := s.controls.RenewOccupancy(rctx, slot, owner, t.Lease)
		if errors.Is(err, lock.ErrNotHeld) && !replace {
			var o lock.Occupancy
			if o, err = s.controls.Occupy(rctx, slot, owner, t.Lease, false); err == nil && !o.Taken {
				log().Warn("the task's running record expired and another slot took it; both run", "other_slot", o.Other)
			}
		}
		rcancel()
		if errors.Is(err, lock.ErrNotHeld) {
			log().Warn("a newer slot replaced this attempt: cancelling the task")
			cancel(ErrSuperseded)
			return
		}
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
