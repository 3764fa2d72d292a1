package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// A backfill runs every scheduled slot of a task in a past range once,
// oldest first, on the replica that received the request: its loop
// admits the slots a few at a time and each is claimed, run, retried and
// recorded as a fired slot is. The slot keeps its scheduled id, so the
// claim's done marker keeps it to one success fleet-wide (a slot done
// within its done TTL is not run again, and two backfills of one range,
// on one replica or on several, run each slot once); its deadline is new,
// the admission time plus the task's window, so the claim's no-early-run
// check (slot time, already past) and its window check (the new deadline)
// both pass as written. The request lives in this replica's memory only:
// if the replica dies, the slots not yet admitted are lost; the same
// request, sent again to any replica, runs every slot not done (a slot
// whose attempts were all spent stays exhausted).

// Backfill limits.
const (
	// MaxBackfillSlots caps the slots one backfill request may cover.
	MaxBackfillSlots = 1000
	// BackfillInFlight is how many slots of one backfill are claimed or
	// run at once (one, under concurrency = "forbid": its slots would
	// otherwise skip each other).
	BackfillInFlight = 4
	// MaxBackfills caps the backfills under way on one replica.
	MaxBackfills = 8
	// backfillCount bounds the fire times counted to name a range's size
	// in the error that refuses it.
	backfillCount = 100 * MaxBackfillSlots
)

// Errors of Backfill.
var (
	// ErrBackfillRange: the range is empty, in the future, or holds no slot.
	ErrBackfillRange = errors.New("scheduler: bad backfill range")
	// ErrBackfillLimit: the range holds more than MaxBackfillSlots slots.
	ErrBackfillLimit = errors.New("scheduler: backfill limit")
	// ErrBackfillBusy: MaxBackfills backfills are under way on this replica.
	ErrBackfillBusy = errors.New("scheduler: backfills busy")
	// ErrBackfillTask: the task is not configured, or its concurrency
	// policy is replace.
	ErrBackfillTask = errors.New("scheduler: cannot backfill the task")
	// ErrNotRunning: Run has not started the loop yet.
	ErrNotRunning = errors.New("scheduler: not running yet")
)

// BackfillPlan is the answer to Backfill: the slots queued.
type BackfillPlan struct {
	Task     string    `json:"task"`
	From     time.Time `json:"from"`
	To       time.Time `json:"to"`
	Slots    int       `json:"slots"`      // slots queued, oldest first
	First    string    `json:"first_slot"` // the oldest's id
	Last     string    `json:"last_slot"`  // the newest's id
	InFlight int       `json:"in_flight"`  // at most this many at once
}

// backfill is one request on the loop: the slot times not yet admitted and
// the runs admitted and not ended. Only the loop touches it.
type backfill struct {
	t        *Task
	at       []time.Time // oldest first
	live     []*run
	inFlight int
	plan     BackfillPlan
	err      error
	done     chan struct{} // closed once the loop has taken or refused it
}

// Backfill queues every fire time of task in [from, to) — unions and
// active_from/active_until as the schedule has them — on this replica's
// loop, and returns the plan once the loop has taken it. to must not be
// after the store's clock now: a slot whose time has not come is the
// schedule's. It refuses an unknown task, one with concurrency =
// "replace" (a backfilled slot would cancel the slot running now), an
// empty or future range, a range without a slot or with more than
// MaxBackfillSlots, and a request beyond MaxBackfills under way;
// each error names the value at fault.
func (s *Scheduler) Backfill(ctx context.Context, task string, from, to time.Time) (BackfillPlan, error) {
	var t *Task
	list := s.Tasks()
	for i := range list {
		if list[i].Name == task {
			t = &list[i]
		}
	}
	if t == nil {
		return BackfillPlan{}, fmt.Errorf("%w: no task %q in the config", ErrBackfillTask, task)
	}
	at, err := backfillTimes(t, from.UTC(), to.UTC(), s.now())
	if err != nil {
		return BackfillPlan{}, err
	}
	n := BackfillInFlight
	if t.Concurrency == ConcurrencyForbid {
		n = 1
	}
	req := &backfill{t: t, at: at, inFlight: n, done: make(chan struct{}), plan: BackfillPlan{
		Task: t.Name, From: from.UTC(), To: to.UTC(), Slots: len(at), InFlight: n,
		First: t.Schedule.SlotID(at[0]), Last: t.Schedule.SlotID(at[len(at)-1]),
	}}
	s.mu.Lock()
	l, ran := s.loop, s.ran
	if l == nil {
		s.mu.Unlock()
		if ran {
			return BackfillPlan{}, ErrStopped
		}
		return BackfillPlan{}, ErrNotRunning
	}
	l.inbox.post(event{kind: backfilled, backfill: req})
	s.mu.Unlock()
	select {
	case <-req.done:
		return req.plan, req.err
	case <-ctx.Done():
		return BackfillPlan{}, context.Cause(ctx)
	}
}

// backfillTimes returns t's fire times in [from, to), oldest first, or an
// error naming what is wrong with the range at now (the store's clock).
func backfillTimes(t *Task, from, to, now time.Time) ([]time.Time, error) {
	const layout = time.RFC3339
	switch {
	case t.Concurrency == ConcurrencyReplace:
		return nil, fmt.Errorf("%w: task %s has concurrency = %q: a backfilled slot would cancel the slot running now",
			ErrBackfillTask, t.Name, t.Concurrency)
	case !from.Before(to):
		return nil, fmt.Errorf("%w: from %s is not before to %s", ErrBackfillRange, from.Format(layout), to.Format(layout))
	case to.After(now):
		return nil, fmt.Errorf("%w: to %s is in the future (now %s by the store's clock): a slot whose time has not come runs as scheduled",
			ErrBackfillRange, to.Format(layout), now.Format(layout))
	}
	var at []time.Time
	n := 0
	for next := t.Schedule.Next(from.Add(-time.Nanosecond)); !next.IsZero() && next.Before(to); next = t.Schedule.Next(next) {
		if n++; n > backfillCount {
			return nil, fmt.Errorf("%w: task %s: from %s to %s holds more than %d slots; at most %d per request",
				ErrBackfillLimit, t.Name, from.Format(layout), to.Format(layout), backfillCount, MaxBackfillSlots)
		}
		if n <= MaxBackfillSlots {
			at = append(at, next)
		}
	}
	switch {
	case n == 0:
		return nil, fmt.Errorf("%w: task %s (schedule %q) has no slot from %s to %s",
			ErrBackfillRange, t.Name, t.Spec, from.Format(layout), to.Format(layout))
	case n > MaxBackfillSlots:
		return nil, fmt.Errorf("%w: task %s: from %s to %s holds %d slots; at most %d per request",
			ErrBackfillLimit, t.Name, from.Format(layout), to.Format(layout), n, MaxBackfillSlots)
	}
	return at, nil
}

// onBackfill takes a backfill request, unless the replica is stopping, the
// task was reloaded since the request read it, or MaxBackfills are under
// way.
func (l *loop) onBackfill(b *backfill) {
	defer close(b.done)
	switch {
	case l.stopping:
		b.err = ErrStopped
	case l.backfillTask(b) == nil:
		b.err = fmt.Errorf("%w: task %s was changed or removed by a reload while the request was read: send it again", ErrBackfillTask, b.t.Name)
	case len(l.backfills) >= MaxBackfills:
		b.err = fmt.Errorf("%w: %d backfills are under way on this replica, the most it takes (MaxBackfills); wait for one to finish",
			ErrBackfillBusy, len(l.backfills))
	default:
		l.backfills = append(l.backfills, b)
		l.s.stats.Task(b.t.Name).BackfillLeft.Add(int64(len(b.at)))
		l.s.log.Info("backfill queued", "task", b.t.Name, "slots", len(b.at), "first_slot", b.plan.First, "last_slot", b.plan.Last)
	}
}

// backfillTask returns b's task as the loop has it now, and makes it b's:
// after a reload that left the task's definition as it was, the reloaded
// one; nil if a reload removed or changed it.
func (l *loop) backfillTask(b *backfill) *Task {
	cur := l.current[b.t.Name]
	if cur == nil || (cur != b.t && !sameTask(cur, b.t)) {
		return nil
	}
	b.t = cur
	return cur
}

// backfillDue admits the next slots of each backfill while fewer than its
// in-flight limit run, and drops a backfill once every slot has been
// admitted and has ended (or the replica stops, or a reload removed or
// changed its task: its slots not admitted are dropped).
func (l *loop) backfillDue() {
	l.backfills = slices.DeleteFunc(l.backfills, func(b *backfill) bool {
		st := l.s.stats.Task(b.t.Name)
		before := len(b.at) + len(b.live)
		defer func() { st.BackfillLeft.Add(int64(len(b.at) + len(b.live) - before)) }()
		b.live = slices.DeleteFunc(b.live, func(r *run) bool { return r.state == ended })
		if len(b.at) > 0 && (l.stopping || l.backfillTask(b) == nil) {
			reason := "the replica is shutting down"
			if !l.stopping {
				reason = "a reload changed or removed the task"
			}
			l.s.log.Warn("backfill stopped: slots not started are dropped", "task", b.t.Name, "dropped", len(b.at), "reason", reason)
			b.at = nil
		}
		for len(b.at) > 0 && len(b.live) < b.inFlight {
			at := b.at[0]
			b.at = b.at[1:]
			slot := b.t.Slot(at)
			slot.Deadline = l.s.now().Add(b.t.Window()).UTC()
			r := l.newSlotRun(b.t, slot)
			r.backfill = true
			b.live = append(b.live, r)
			st.Backfilled.Inc()
			l.advance(r, false)
		}
		if len(b.at) == 0 && len(b.live) == 0 {
			l.s.log.Info("backfill finished", "task", b.t.Name, "slots", b.plan.Slots)
			return true
		}
		return false
	})
}
