package lock

import (
	"context"
	"strconv"
	"strings"
	"time"
)

// Controls is the fleet-wide operator state of tasks, kept in the store so
// that every replica agrees: run-now requests (triggers), pauses, and which
// slot of a task is running (for the concurrency policies forbid and
// replace). Every store of slotd implements it (Redlock through a quorum
// of its masters); a store of one's own that does not offers no operator
// controls.
//
// A triggered run is a slot of its own (TriggerSlot): its id is the trigger
// time in UTC to the second followed by "t", which no schedule's slot id
// (digits only) can equal. Its attempt numbers start after TriggerBase
// (ArmTrigger), so that its fencing tokens, slot_unix_seconds*1000 +
// attempt, exceed those of a scheduled slot of the same second.
type Controls interface {
	// Trigger records a run-now request for task, at the store's clock, and
	// wakes the replicas. Triggers of one task in one second are one
	// trigger (the second answers Coalesced). With a non-empty key, a
	// request repeating a key seen within TriggerTTL starts nothing and
	// answers the trigger the key first started (Repeated); a task keeps
	// its MaxTriggerKeys latest keys. A trigger
	// stays pending for window (its slot's window), then is dropped.
	Trigger(ctx context.Context, task, key string, window time.Duration) (Trigger, error)
	// Triggers lists the pending triggers of each of tasks, in order,
	// each oldest first (one round trip on Redis).
	Triggers(ctx context.Context, tasks []string) ([][]time.Time, error)
	// ArmTrigger readies slot, a TriggerSlot, for its first claim: its
	// attempt counter starts at TriggerBase. It changes nothing once the
	// slot has been armed or claimed. Every replica arms a trigger before
	// it claims it.
	ArmTrigger(ctx context.Context, slot Slot, doneTTL time.Duration) error
	// SetPaused writes task's pause state: Pause, Resume, or Seed (pause
	// unless a state is recorded: a replica that knows the task paused
	// writes back a pause the store lost). It reports whether the task is
	// paused after the write, and wakes the replicas if it changed.
	SetPaused(ctx context.Context, task string, op PauseOp) (bool, error)
	// Configure applies the config's paused value of each of tasks
	// (paused[i]) and reports whether each is paused after. A change of
	// the value is an operator's act, as Kubernetes' suspend: a value
	// unlike the one last applied (kept beside the state) pauses or
	// resumes the task; the same value changes nothing, so a later pause
	// or resume stands. With no value applied yet, a recorded state
	// stands, and a task without one is paused if its value says so.
	Configure(ctx context.Context, tasks []string, paused []bool) ([]bool, error)
	// Paused reads the pause state of each of tasks, in order; with renew
	// it also renews the TTL of each state recorded (live replicas do, so
	// that a pause lasts while any replica lives; status pages only read).
	Paused(ctx context.Context, tasks []string, renew bool) ([]bool, error)
	// Occupy records owner's attempt of slot as the one running its task,
	// for lease. If another slot's attempt is recorded, forbid leaves it
	// and answers Busy; replace takes its place, answers Replaced and wakes
	// that attempt's watchers (WatchRunning). An expired record (its
	// holder crashed) is no record. With replace, a record taken whose
	// slot's earlier Occupy replaced another slot's within a lease (a
	// lost reply, a retry of the slot) answers that slot as Other: its
	// attempt may still be stopping.
	Occupy(ctx context.Context, slot Slot, owner Owner, lease time.Duration, replace bool) (Occupancy, error)
	// RenewOccupancy extends owner's record; ErrNotHeld if it was replaced
	// or has expired.
	RenewOccupancy(ctx context.Context, slot Slot, owner Owner, lease time.Duration) error
	// Vacate removes owner's record, if it is still owner's.
	Vacate(ctx context.Context, slot Slot, owner Owner) error
	// WatchTask reports changes of task's controls: a trigger, a pause or
	// resume, and a replace of its running attempt.
	WatchTask(task string) *Watch
	// Epoch is a number that Trigger and SetPaused change after each
	// change they make (0 before the first): a replica that reads it at
	// each clock check learns of a change whose notice it missed, at the
	// cost of one read, whatever the number of tasks.
	Epoch(ctx context.Context) (int64, error)
}

// Bounds of the records the capabilities keep (Controls, Fleet).
const (
	// FirstStartTTL is the fleet's first-start record's TTL. Every replica
	// renews it at each clock check, so it expires only when the whole
	// fleet has been down this long; the next start then counts as a new
	// fleet's first.
	FirstStartTTL = 400 * 24 * time.Hour
	// TriggerTTL bounds how long a pending trigger and an idempotency key
	// are kept.
	TriggerTTL = 24 * time.Hour
	// MaxTriggerKeys bounds the idempotency keys kept per task: a client
	// that sends a new key with every request cannot grow the store
	// without bound. The oldest key goes first; a request repeating it
	// then starts a run again.
	MaxTriggerKeys = 1000
	// PauseTTL is the pause state's TTL. Every live replica renews it at
	// each clock check; if the whole fleet is down longer than this, the
	// state is gone and each task starts as its config says.
	PauseTTL = 7 * 24 * time.Hour
	// ControlsSweep is how often a replica reads every task's controls
	// even if the epoch has not changed: it renews the pause states' TTLs.
	ControlsSweep = time.Hour
)

// PauseOp is a write of a task's pause state.
type PauseOp int

// Pause operations.
const (
	Pause  PauseOp = iota + 1 // pause the task
	Resume                    // resume it
	Seed                      // pause it unless a state (paused or resumed) is recorded
)

// TriggerResult is how a trigger request was taken.
type TriggerResult int

// Trigger results.
const (
	Started   TriggerResult = iota + 1 // a new trigger
	Coalesced                          // a trigger of the task in the same second exists: that one
	Repeated                           // the idempotency key was seen: its trigger
)

var triggerNames = [...]string{"", "started", "coalesced", "repeated"}

// String is "started", "coalesced" or "repeated".
func (r TriggerResult) String() string {
	if r > 0 && int(r) < len(triggerNames) {
		return triggerNames[r]
	}
	return "TriggerResult(" + strconv.Itoa(int(r)) + ")"
}

// Trigger is the answer to Controls.Trigger.
type Trigger struct {
	Result TriggerResult
	Time   time.Time // the trigger's second: TriggerSlot's time
}

// Occupancy is the answer to Controls.Occupy.
type Occupancy struct {
	Taken bool   // the caller's attempt is recorded as the task's running one
	Other string // Busy, Replaced, or replaced by this slot within a lease: the other attempt's slot id ("" if none)
	Value string // the other record as it was
	TTL   time.Duration
}

// TriggerSlot is the slot of task's trigger at at (a whole second), with
// window as its window: id "<yyyymmddhhmmss>t".
func TriggerSlot(task string, at time.Time, window time.Duration) Slot {
	at = at.UTC().Truncate(time.Second)
	return Slot{Task: task, ID: at.Format("20060102150405") + "t", Time: at, Deadline: at.Add(window)}
}

// Triggered reports whether s is an operator's trigger (TriggerSlot), by
// its id.
func (s Slot) Triggered() bool { return strings.HasSuffix(s.ID, "t") }

// ShownAttempt is attempt, a count of the slot's attempts as the store
// keeps it, as a task, a hook, the history and the pages show it: 1 to
// max_attempts. A triggered slot counts from TriggerBase, for its tokens
// only: its attempt TriggerBase+1 is shown as 1.
func (s Slot) ShownAttempt(attempt int) int {
	if s.Triggered() && attempt > TriggerBase {
		return attempt - TriggerBase
	}
	return attempt
}
