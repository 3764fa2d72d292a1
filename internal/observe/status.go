package observe

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/slotd/slotd/internal/stats"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/redislock"
	"github.com/slotd/slotd/scheduler"
	"github.com/slotd/slotd/scheduler/history"
)

// Phases of a slot in a status: what an operator wants to know about it,
// derived from the store's state, the run history and the slot window.
const (
	PhaseDone      = "done"      // succeeded (the done marker, or the history once the marker expired)
	PhaseRunning   = "running"   // an attempt holds the slot
	PhaseRetrying  = "retrying"  // attempts failed; the window is open and attempts remain
	PhasePending   = "pending"   // the window is open and nothing has claimed the slot yet
	PhaseFailed    = "failed"    // the window closed after failed attempts, below the cap
	PhaseExhausted = "exhausted" // every allowed attempt failed
	// PhaseMissed: the window closed and nothing ever claimed the slot, or
	// it waited (concurrency = "queue") for the task's running slot until
	// its window closed (its done marker then only settles it).
	PhaseMissed  = "missed"
	PhaseUnknown = "unknown" // the slot's keys and history have expired
	// PhaseUnscheduled: the slot fired before the fleet's first start
	// (lock.Fleet) and nothing ever claimed it: no replica existed to miss it.
	PhaseUnscheduled = "unscheduled"
	PhaseForeign     = "foreign" // the slot key holds a value slotd did not write
	// PhasePaused: the window closed with nothing claimed while the task
	// is paused (as the store says now): skipped, not missed.
	PhasePaused = "paused"
)

// TaskStatus is one task's row in the fleet view.
type TaskStatus struct {
	Name        string       `json:"name"`
	Schedule    string       `json:"schedule"` // the spec as written
	Timezone    string       `json:"timezone"`
	Plugin      string       `json:"plugin"`
	MaxAttempts int          `json:"max_attempts"`
	Next        time.Time    `json:"next,omitzero"` // the next fire time
	Paused      bool         `json:"paused"`        // paused (slotd pause, or paused = true); its slots are skipped
	Slots       []SlotStatus `json:"slots"`         // the latest slots, newest first
	// ReadError says what of this task could not be read (a key of its
	// that holds what slotd did not write, or a read that failed): the
	// rest of its status is what could be, and other tasks read in full.
	ReadError string `json:"read_error,omitempty"`
}

// SlotStatus is one slot of a task as the fleet sees it.
type SlotStatus struct {
	ID       string    `json:"id"`
	Time     time.Time `json:"time"`
	Deadline time.Time `json:"deadline"` // the end of its window
	Phase    string    `json:"phase"`    // one of the Phase constants
	State    string    `json:"state"`    // the store's: free, running, done or foreign
	Attempts int       `json:"attempts"` // attempts counted by the store (0 once its keys expire)
	// Running: the holder; done: the winner.
	Replica  string    `json:"replica,omitempty"`
	Attempt  int       `json:"attempt,omitempty"`
	Finished time.Time `json:"finished,omitzero"` // done: when, by the store's clock
	// The latest attempt recorded in the history, if any: its start,
	// duration, outcome and error.
	Last *scheduler.HistoryEntry `json:"last_attempt,omitempty"`
}

// StatusReport is the fleet view as `slotd status -json` and /api/v1/tasks
// write it.
type StatusReport struct {
	Now   time.Time    `json:"now"` // by the store's clock
	Tasks []TaskStatus `json:"tasks"`
	// A page of /api/v1/tasks: the tasks configured, this page (1-based)
	// and how many there are (absent from `slotd status -json`, which
	// reads every task).
	Total int `json:"total,omitempty"`
	Page  int `json:"page,omitempty"`
	Pages int `json:"pages,omitempty"`
}

// historyReaders bounds the history reads of one view in flight at once
// on a history that cannot read many tasks at once (historyBatch): one
// per task, concurrent so that many tasks cost a few round trips, not one
// each, without a burst of connections.
const historyReaders = 8

// Status computes the fleet's view of tasks at now (the store's time,
// ideally): for each task its next fire time and its latest n slots, with
// their state in store and their latest attempt in hist (nil: no history).
// It only reads, and needs no running daemon. Every slot's state is read
// in one call of store.States (one pipeline on Redis), and the tasks'
// history in one batch (a few pipelines on Redis).
func Status(ctx context.Context, tasks []scheduler.Task, store lock.Store, hist scheduler.History, now time.Time, n int) ([]TaskStatus, error) {
	lasts, herrs, err := latestAttempts(ctx, tasks, nil, hist, n)
	if err != nil {
		return nil, err
	}
	r, err := readSlots(ctx, tasks, store, now, n)
	if err != nil {
		return nil, err
	}
	return r.statuses(lasts, herrs), nil
}

// slotsRead is the store's state of the latest slots of tasks at now.
type slotsRead struct {
	tasks      []scheduler.Task
	now        time.Time
	firstStart time.Time   // the fleet's first start; zero: unknown
	slots      []lock.Slot // tasks[i]'s are slots[first[i]:first[i+1]], newest first
	first      []int
	states     []lock.State // of slots
	paused     []bool       // by task: paused fleet-wide, as the store says (false if it cannot say)
	pauseErrs  []error      // by task: why its pause state could not be read
}

// readSlots reads the state of the latest n slots of every task in one
// call of store.States.
func readSlots(ctx context.Context, tasks []scheduler.Task, store lock.Store, now time.Time, n int) (*slotsRead, error) {
	r := &slotsRead{tasks: tasks, now: now, first: make([]int, len(tasks)+1)}
	// Slots before the fleet's first start were never scheduled. A store
	// without a fleet record (Memory), or one that cannot say, leaves
	// every slot eligible to be missed.
	if f, ok := store.(lock.Fleet); ok {
		r.firstStart, _ = f.FirstStart(ctx)
	}
	r.paused, r.pauseErrs = make([]bool, len(tasks)), make([]error, len(tasks))
	var triggers [][]time.Time // by task, oldest first: an operator's run-now slots
	if c, ok := store.(lock.Controls); ok && len(tasks) > 0 {
		names := make([]string, len(tasks))
		for i := range tasks {
			names[i] = tasks[i].Name
		}
		if p, err := c.Paused(ctx, names, false); err == nil && len(p) == len(tasks) {
			r.paused = p
		} else if k := lock.Classify(err); ctx.Err() == nil && (k == lock.KindNone || k == lock.KindOther) {
			// One task's key of another type (not the store: it answered)
			// fails the whole read: read each task's alone, so that the
			// error is that task's. It costs a round trip per task, only
			// while the store holds such a key (and the API reads a page of
			// tasks at a time).
			for i := range names {
				if p, err := c.Paused(ctx, names[i:i+1], false); err != nil {
					r.pauseErrs[i] = fmt.Errorf("pause state: %w", err)
				} else {
					r.paused[i] = p[0]
				}
			}
		}
		if tr, err := c.Triggers(ctx, names); err == nil && len(tr) == len(tasks) {
			triggers = tr
		}
	}
	for i := range tasks {
		t := &tasks[i]
		r.first[i] = len(r.slots)
		var trig []time.Time
		if triggers != nil {
			trig = triggers[i]
		}
		r.slots = latestSlots(r.slots, t, trig, now, n)
	}
	r.first[len(tasks)] = len(r.slots)
	// A foreign value reads as "foreign", with an error beside the states.
	sts, err := store.States(ctx, r.slots)
	if sts == nil && err != nil {
		return nil, fmt.Errorf("status: %s: %w", taskNames(tasks), err)
	}
	for j := range sts {
		// A triggered slot's counter starts at lock.TriggerBase (for its
		// tokens); its attempts are shown from 1, as the history has them.
		if r.slots[j].Triggered() {
			sts[j].Attempt = r.slots[j].ShownAttempt(sts[j].Attempt)
			if sts[j].Attempts >= lock.TriggerBase {
				sts[j].Attempts -= lock.TriggerBase
			}
		}
	}
	r.states = sts
	return r, nil
}

// latestSlots appends to slots t's latest n slots at now, newest first:
// its scheduled ones and its triggered ones (trig, the triggers' times,
// oldest first), merged by time, a trigger before a scheduled slot of the
// same second.
func latestSlots(slots []lock.Slot, t *scheduler.Task, trig []time.Time, now time.Time, n int) []lock.Slot {
	k := len(trig) - 1
	for k >= 0 && trig[k].After(now) {
		k--
	}
	at, ok := t.Schedule.Latest(now)
	for added := 0; added < n && (ok || k >= 0); added++ {
		if k >= 0 && (!ok || !trig[k].Before(at)) {
			slots = append(slots, t.TriggerSlot(trig[k]))
			k--
			continue
		}
		slots = append(slots, t.Slot(at))
		at, ok = t.Schedule.Latest(at.Add(-time.Second))
	}
	return slots
}

// settled reports whether task i's slots say all there is to say without
// the history: each is running, done, or open and plainly pending. A task
// for which it is false may have a slot whose phase or error only the
// history knows.
func (r *slotsRead) settled(i int) bool {
	t := &r.tasks[i]
	for j := r.first[i]; j < r.first[i+1]; j++ {
		slot, st := r.slots[j], r.states[j]
		switch {
		case st.Status == "running" || st.Status == "done":
		case st.Status == "free" && st.Attempts == 0 && r.now.Before(slot.Deadline) && !unscheduled(t, slot, r.firstStart):
		default:
			return false
		}
	}
	return true
}

// statuses builds each task's status from r and lasts, the latest attempt
// per slot of each task (a nil map: none known), with herrs[i] the error
// of task i's history read (herrs may be nil).
func (r *slotsRead) statuses(lasts []map[string]*scheduler.HistoryEntry, herrs []error) []TaskStatus {
	out := make([]TaskStatus, 0, len(r.tasks))
	for i := range r.tasks {
		t := &r.tasks[i]
		tz := t.Timezone
		if tz == "" {
			tz = "UTC"
		}
		ts := TaskStatus{
			Name: t.Name, Schedule: t.Spec, Timezone: tz, Plugin: t.Plugin,
			MaxAttempts: t.MaxAttempts, Next: t.Schedule.Next(r.now), Paused: r.paused[i],
			Slots: make([]SlotStatus, 0, r.first[i+1]-r.first[i]),
		}
		for j := r.first[i]; j < r.first[i+1]; j++ {
			slot, st := r.slots[j], r.states[j]
			ss := SlotStatus{
				ID: slot.ID, Time: slot.Time, Deadline: slot.Deadline,
				State: st.Status, Attempts: st.Attempts,
				Replica: st.Holder, Attempt: st.Attempt, Finished: st.Finished,
				Last: lasts[i][slot.ID],
			}
			ss.Phase = phase(t, slot, st, ss.Last, r.now, r.firstStart)
			if ss.Phase == PhaseMissed && r.paused[i] {
				ss.Phase = PhasePaused
			}
			ts.Slots = append(ts.Slots, ss)
		}
		var errs []error
		for j := r.first[i]; j < r.first[i+1]; j++ {
			if st := r.states[j]; st.Status == "foreign" {
				state, _ := redislock.Keys("", r.slots[j]) // the key without the store's prefix
				errs = append(errs, fmt.Errorf("slot %s (key …%s): %w: %q", r.slots[j].ID, state, lock.ErrForeign, st.Value))
				break // one says it; the slots show the others
			}
		}
		if herrs != nil && herrs[i] != nil {
			errs = append(errs, herrs[i])
		}
		if r.pauseErrs[i] != nil {
			errs = append(errs, r.pauseErrs[i])
		}
		if err := errors.Join(errs...); err != nil {
			ts.ReadError = strings.ReplaceAll(err.Error(), "\n", "; ")
		}
		out = append(out, ts)
	}
	return out
}

// taskNames names tasks in an error: the first few, and how many more.
func taskNames(tasks []scheduler.Task) string {
	const shown = 5
	var b strings.Builder
	b.WriteString("task")
	if len(tasks) != 1 {
		b.WriteString("s")
	}
	for i := range min(shown, len(tasks)) {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(" " + tasks[i].Name)
	}
	if len(tasks) > shown {
		fmt.Fprintf(&b, " and %d more", len(tasks)-shown)
	}
	return b.String()
}

// historyBatch is a History that reads many tasks' entries in few round
// trips; redislock.History is one.
type historyBatch interface {
	// RecentEach returns up to ns[i] of tasks[i]'s entries, newest first,
	// and errs[i], the error of tasks[i]'s read.
	RecentEach(ctx context.Context, tasks []string, ns []int) ([][]scheduler.HistoryEntry, []error)
}

// latestAttempts returns, for each task (each i with want[i] if want is
// not nil), the latest attempt of each slot in hist among enough entries
// for n slots that each used every attempt, and the error of each task
// whose history could not be read: in one batch if hist can
// (historyBatch), else one read per task, historyReaders at a time. Only
// ctx's end fails the whole.
func latestAttempts(ctx context.Context, tasks []scheduler.Task, want []bool, hist scheduler.History, n int) ([]map[string]*scheduler.HistoryEntry, []error, error) {
	lasts := make([]map[string]*scheduler.HistoryEntry, len(tasks))
	errs := make([]error, len(tasks))
	if hist == nil || n <= 0 {
		return lasts, errs, nil
	}
	count := func(t *scheduler.Task) int { return min(history.MaxLen, n*(t.MaxAttempts+1)) }
	if b, ok := hist.(historyBatch); ok {
		names, counts := make([]string, len(tasks)), make([]int, len(tasks))
		for i := range tasks {
			if want == nil || want[i] {
				names[i], counts[i] = tasks[i].Name, count(&tasks[i])
			}
		}
		got, gerrs := b.RecentEach(ctx, names, counts)
		if err := ctx.Err(); err != nil {
			return nil, nil, fmt.Errorf("status: %w", err)
		}
		for i, es := range got {
			if counts[i] > 0 && gerrs[i] == nil {
				lasts[i] = latestPerSlot(es, n)
			}
			errs[i] = gerrs[i]
		}
		return lasts, errs, nil
	}
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(historyReaders, len(tasks)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				t := &tasks[i]
				es, err := hist.Recent(ctx, t.Name, count(t))
				if err != nil {
					errs[i] = err
					continue
				}
				lasts[i] = latestPerSlot(es, n)
			}
		}()
	}
	for i := range tasks {
		if ctx.Err() != nil {
			break
		}
		if want != nil && !want[i] {
			continue
		}
		next <- i
	}
	close(next)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("status: %w", err)
	}
	return lasts, errs, nil
}

// latestPerSlot maps each slot of es to its latest attempt: the highest
// attempt number (the store's, which only grows within a slot, whatever
// the replicas' clocks say), then the latest start.
func latestPerSlot(es []scheduler.HistoryEntry, n int) map[string]*scheduler.HistoryEntry {
	last := make(map[string]*scheduler.HistoryEntry, n)
	for k := range es {
		e := &es[k]
		if l, ok := last[e.Slot]; !ok || e.Attempt > l.Attempt || e.Attempt == l.Attempt && e.Started.After(l.Started) {
			last[e.Slot] = e
		}
	}
	// Keep copies: a pointer into es would keep every entry read (and its
	// output) for as long as the view is.
	for slot, e := range last {
		c := *e
		last[slot] = &c
	}
	return last
}

// phase says what became of slot, from its state in the store, its latest
// attempt in the history (nil if none), the time and the fleet's first
// start (zero if unknown).
func phase(t *scheduler.Task, slot lock.Slot, st lock.State, last *scheduler.HistoryEntry, now, first time.Time) string {
	open := now.Before(slot.Deadline)
	switch {
	case st.Status == "free" && st.Attempts == 0 && last == nil && unscheduled(t, slot, first):
		return PhaseUnscheduled
	case st.Status == "running":
		return PhaseRunning
	case st.Status == "done" && missedQueued(last):
		return PhaseMissed
	case st.Status == "done":
		return PhaseDone
	case st.Status == "foreign":
		return PhaseForeign
	case st.Attempts >= t.MaxAttempts:
		return PhaseExhausted
	case st.Attempts > 0 && open:
		return PhaseRetrying
	case st.Attempts > 0 && succeeded(last):
		// The task succeeded but the slot could not be marked done
		// (success_unmarked), and no later attempt followed.
		return PhaseDone
	case st.Attempts > 0:
		return PhaseFailed
	case open:
		// Nothing claimed it yet, or an operator cleared it (slotd rerun):
		// the history may hold attempts from before.
		return PhasePending
	}
	// The window is closed and the store holds nothing: either nothing ever
	// claimed the slot, or its keys expired and only the history remembers.
	switch {
	case succeeded(last):
		return PhaseDone
	case missedQueued(last):
		return PhaseMissed
	case last != nil && last.Attempt >= t.MaxAttempts:
		return PhaseExhausted
	case last != nil:
		return PhaseFailed
	case now.Before(slot.Time.Add(t.DoneTTL)):
		// A claim would have left an attempts counter that lives this long.
		return PhaseMissed
	}
	return PhaseUnknown
}

// missedQueued reports whether the slot's last entry says it waited for its
// task's running slot until its window closed (concurrency = "queue").
func missedQueued(last *scheduler.HistoryEntry) bool {
	return last != nil && last.Outcome == stats.OutcomeMissedQueue
}

// unscheduled reports whether slot was never this fleet's to run: it fired
// before the fleet's first start (zero: unknown, never), and its window
// either closed before then or was open but not caught up (catchup none,
// or the slot older than catchup_limit at the first start).
func unscheduled(t *scheduler.Task, slot lock.Slot, first time.Time) bool {
	if first.IsZero() || !slot.Time.Before(first) {
		return false
	}
	if !first.Before(slot.Deadline) {
		return true
	}
	return t.Catchup != scheduler.CatchupLatest || (t.CatchupLimit > 0 && first.Sub(slot.Time) > t.CatchupLimit)
}

// succeeded reports whether the attempt last recorded ran its task to
// success, whether or not the slot could then be marked done.
func succeeded(last *scheduler.HistoryEntry) bool {
	return last != nil && (last.Outcome == stats.OutcomeSuccess || last.Outcome == stats.OutcomeSuccessUnmarked)
}
