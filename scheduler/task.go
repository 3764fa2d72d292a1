package scheduler

import (
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"time"

	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/retry"
	"github.com/slotd/slotd/scheduler/schedule"
	"github.com/slotd/slotd/tasks"
)

// Task is one configured [[task]]: what runs, when, and how its slots are
// claimed. It is read-only once loaded.
type Task struct {
	Name     string
	Spec     string         // the schedule key as written; schedules joined by "; "
	Timezone string         // as written; "" is UTC
	Plugin   string         // the registered plugin name
	Params   map[string]any // [task.params]; never nil

	// Policy is how each slot is claimed: lease, done TTL, attempt cap.
	lock.Policy
	Timeout time.Duration // one attempt's limit; > 0
	Catchup Catchup       // CatchupNone (the zero value) or CatchupLatest
	// CatchupLimit bounds catch-up: a slot older than this at start-up is
	// not caught up (0: no bound but the window).
	CatchupLimit time.Duration
	Deadline     time.Duration // 0: a slot's window ends at the next fire time; else slot time + Deadline
	// Jitter spreads starts: each slot's claim waits StartDelay after its
	// slot time, less than Jitter; 0 starts at the slot time.
	Jitter time.Duration
	// OutputTail is how many bytes of each attempt's output (its tail)
	// the history keeps, at most history.MaxOutput; 0 keeps none.
	OutputTail int
	// Paused: the task starts paused unless the store records a pause
	// state for it (an operator's pause or resume); see lock.Controls.
	Paused bool
	// Concurrency is what a slot does while the task's previous slot still
	// runs: ConcurrencyAllow (the zero value), ConcurrencyForbid or
	// ConcurrencyReplace.
	Concurrency Concurrency
	// RetryBackoff spaces a slot's attempts, fleet-wide: after a failed
	// attempt the release keeps a not-before time in the store, so the next
	// attempt, on any replica, starts no sooner than RetryDelay later by the
	// store's clock. The zero value hands the slot to a peer at once.
	RetryBackoff retry.Backoff

	Schedule *schedule.Schedule
	Job      tasks.Task // built by the plugin's factory at load

	// OnFailure, if set, runs once per slot that ends exhausted or missed
	// (see notify.go).
	OnFailure *Hook
}

// Hook is an on_failure hook: a plugin's task, run on exactly one replica
// with the failed slot's facts in its context (tasks.FailureFrom).
type Hook struct {
	Plugin  string         // the registered plugin name
	Params  map[string]any // its params; never nil
	Timeout time.Duration  // bounds one run of the hook; > 0
	Job     tasks.Task     // built by the plugin's factory at load
}

// Window returns how long after its fire time a slot may still start: the
// deadline if set, else the schedule's longest gap between fire times.
func (t *Task) Window() time.Duration {
	if t.Deadline > 0 {
		return t.Deadline
	}
	return t.Schedule.MaxGap()
}

// SlotDeadline returns the end of the window of the slot that fires at slot:
// slot+Deadline if set, else the next fire time.
func (t *Task) SlotDeadline(slot time.Time) time.Time {
	if t.Deadline > 0 {
		return slot.Add(t.Deadline).UTC()
	}
	return t.Schedule.Following(slot)
}

// StartDelay returns how long after at, one of t's fire times, its slot is
// fired: 0 without Jitter, else FNV-1a of the task's name and the slot id
// modulo Jitter, in whole milliseconds. Every replica computes the same
// delay, so the preferred claimant still claims first; the slot time (and
// with it the slot id, the fencing token, the no-early-run check and the
// start delay metric) stays at.
func (t *Task) StartDelay(at time.Time) time.Duration {
	ms := t.Jitter.Milliseconds()
	if ms <= 0 {
		return 0
	}
	h := fnv.New64a()
	h.Write([]byte(t.Name))
	h.Write([]byte{0})
	h.Write([]byte(t.Schedule.SlotID(at)))
	return time.Duration(h.Sum64()%uint64(ms)) * time.Millisecond
}

// RetryDelay is the retry backoff after the failed attempt of claim c of
// slot (c.Attempt − c.Base attempts made since the last rerun, this one
// included): RetryBackoff.Around(attempts − 1, u) with u hashed from the
// task, the slot id and the attempt, so that the wait is reproducible and
// the same whoever computes it. 0 without a RetryBackoff, and after the
// slot's last allowed attempt, which no attempt follows.
func (t *Task) RetryDelay(slot lock.Slot, c lock.Claim) time.Duration {
	made := c.Attempt - c.Base
	if t.RetryBackoff.Min <= 0 || made >= t.MaxAttempts {
		return 0
	}
	h := fnv.New64a()
	h.Write([]byte(t.Name))
	h.Write([]byte{0})
	h.Write([]byte(slot.ID))
	h.Write([]byte{0})
	h.Write([]byte(strconv.Itoa(c.Attempt)))
	u := float64(h.Sum64()>>11) / (1 << 53) // uniform in [0, 1)
	return t.RetryBackoff.Around(made-1, u)
}

// Concurrency is a concurrency policy (Task.Concurrency), with Kubernetes
// CronJob's names and meanings.
type Concurrency uint8

const (
	ConcurrencyAllow   Concurrency = iota // slots run side by side
	ConcurrencyForbid                     // a slot is skipped while the previous one runs
	ConcurrencyReplace                    // the running slot is cancelled (done, superseded) and the new one runs
	ConcurrencyQueue                      // "queue": the slot waits for the running one (at most one waits), then runs
)

// String is the policy's name in the configuration file: "allow",
// "forbid" or "replace".
func (c Concurrency) String() string {
	switch c {
	case ConcurrencyAllow:
		return "allow"
	case ConcurrencyForbid:
		return "forbid"
	case ConcurrencyReplace:
		return "replace"
	case ConcurrencyQueue:
		return "queue"
	}
	return "concurrency(" + strconv.Itoa(int(c)) + ")"
}

// TriggerSlot returns the slot of an operator's trigger of t at at (see
// lock.TriggerSlot): a window as long as a scheduled slot's.
func (t *Task) TriggerSlot(at time.Time) lock.Slot {
	return lock.TriggerSlot(t.Name, at, t.Window())
}

// ErrBadSlot: a slot id that is not a fire time of the task's schedule.
var ErrBadSlot = errors.New("scheduler: not a slot of the task")

// Slot returns the slot of t that fires at at, a fire time of its schedule.
func (t *Task) Slot(at time.Time) lock.Slot {
	return t.slotOf(at, t.SlotDeadline(at), t.Schedule.SlotID(at))
}

// slotOf is Slot(at), given the schedule's Following(at) (or anything,
// with a Deadline) and the slot id.
func (t *Task) slotOf(at, following time.Time, id string) lock.Slot {
	deadline := following
	if t.Deadline > 0 {
		deadline = at.Add(t.Deadline)
	}
	return lock.Slot{Task: t.Name, ID: id, Time: at.UTC(), Deadline: deadline.UTC()}
}

// ParseSlot returns t's slot whose id is id, or ErrBadSlot if no fire time
// of t's schedule has that id.
func (t *Task) ParseSlot(id string) (lock.Slot, error) {
	layout := t.Schedule.Resolution().Layout()
	start, err := time.ParseInLocation(layout, id, time.UTC)
	if err != nil || start.Format(layout) != id {
		return lock.Slot{}, fmt.Errorf("%w: task %s: slot id %q: want the slot time in UTC as %s (e.g. %s)",
			ErrBadSlot, t.Name, id, layout, t.Schedule.SlotID(t.Schedule.Next(time.Now())))
	}
	// The id names a UTC bucket (an hour, a minute...); the slot is the one
	// fire time in it, which need not be at its start (30 * * * * is 14:30
	// in bucket 2024011514). Fire times are whole seconds.
	at := t.Schedule.Next(start.Add(-time.Second))
	if at.IsZero() || t.Schedule.SlotID(at) != id {
		return lock.Slot{}, fmt.Errorf("%w: task %s (schedule %q): no fire time has slot id %s", ErrBadSlot, t.Name, t.Spec, id)
	}
	return t.Slot(at), nil
}
