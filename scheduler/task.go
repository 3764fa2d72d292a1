package scheduler

import (
	"time"

	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/scheduler/schedule"
	"github.com/slotd/slotd/tasks"
)

// Task is one configured [[task]]: what runs, when, and how its slots are
// claimed. It is read-only once loaded.
type Task struct {
	Name     string
	Spec     string         // the schedule key as written
	Timezone string         // as written; "" is UTC
	Plugin   string         // the registered plugin name
	Params   map[string]any // [task.params]; never nil

	// Policy is how each slot is claimed: lease, done TTL, attempt cap.
	lock.Policy
	Timeout  time.Duration // one attempt's limit; > 0
	Catchup  string        // CatchupLatest or CatchupNone
	Deadline time.Duration // 0: a slot's window ends at the next fire time; else slot time + Deadline

	Schedule *schedule.Schedule
	Job      tasks.Task // built by the plugin's factory at load
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
	return t.Schedule.Next(slot)
}
