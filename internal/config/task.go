package config

import (
	"fmt"
	"regexp"
	"time"

	"github.com/slotd/slotd/scheduler/schedule"
)

// Task is one [[task]], validated: its schedule parsed, its policy merged
// over [defaults] and checked against the schedule. It is data:
// internal/assemble builds the engine's scheduler.Task from it, with the
// job its plugin builds.
type Task struct {
	Name     string
	Spec     string             // the schedule key as written; schedules joined by "; "
	Timezone string             // as written; "" is UTC
	Schedule *schedule.Schedule // Spec parsed in Timezone
	Plugin   string             // the registered plugin's name
	Params   map[string]any     // [task.params]; never nil

	// How each slot is claimed (lock.Policy).
	Lease       time.Duration
	DoneTTL     time.Duration // at least the slot window
	MaxAttempts int           // 1 to MaxAttemptsLimit

	Timeout      time.Duration // one attempt's limit; > 0
	Catchup      Catchup
	CatchupLimit time.Duration // a slot older than this at start-up is not caught up
	Deadline     time.Duration // 0: a slot's window ends at the next fire time
	Jitter       time.Duration // each slot starts up to this long after its slot time; 0: at it
	OutputTail   int           // bytes of output each history entry keeps
	Paused       bool          // starts paused unless the store records a pause state
	Concurrency  Concurrency
	RetryBackoff RetryBackoff // the zero value: none

	// OnFailure is the task's on_failure hook, its own or [defaults]'
	// (then shared by every task that inherits it); nil: none.
	OnFailure *Hook
}

// taskNameRE is what a task name may look like: it is written inside the
// hash-tag braces of Redis keys ("slotd:{<task>:<slot id>}"), so no braces,
// colons or spaces.
var taskNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

func (c *Config) readTasks(top table, defaults rawPolicy, defaultHook rawHook) {
	v, ok := top.m["task"]
	if !ok {
		return
	}
	var list []map[string]any
	switch v := v.(type) {
	case []map[string]any:
		list = v
	case []any:
		for _, e := range v {
			m, ok := e.(map[string]any)
			if !ok {
				top.errorf("task", "must be an array of tables ([[task]]), not an array of %s", tomlType(e))
				return
			}
			list = append(list, m)
		}
	default:
		top.errorf("task", "must be an array of tables: write [[task]], not [task] or task = ...")
		return
	}
	seen := make(map[string]int, len(list))
	for i, m := range list {
		if t, ok := readTask(m, i+1, seen, defaults, defaultHook, top.p); ok {
			c.Tasks = append(c.Tasks, t)
		}
	}
}

// readTask validates the n-th [[task]] (1-based), its plugin checked. It
// reports its problems to t.p and returns false if there were any.
func readTask(m map[string]any, n int, seen map[string]int, defaults rawPolicy, defaultHook rawHook, p *problems) (Task, bool) {
	before := len(p.errs)
	t := table{m: m, path: "task", p: p, scope: fmt.Sprintf("task #%d", n)}
	name, nameOK := t.str("name")
	if nameOK && name != "" {
		t.scope = fmt.Sprintf("task %q (task #%d)", name, n)
	}
	t.checkKeys(taskKeys)

	task := Task{Name: name}
	switch {
	case !t.has("name"):
		t.errorf("name", "required")
	case !nameOK:
	case name == "":
		t.errorf("name", "required")
	case !taskNameRE.MatchString(name):
		t.errorf("name", "%q is not a valid task name: it becomes part of Redis keys inside hash-tag braces ({task:slot}), so it must match %s", name, taskNameRE)
	default:
		if first, dup := seen[name]; dup {
			t.errorf("name", "%q is already used by task #%d; task names must be unique", name, first)
		} else {
			seen[name] = n
		}
	}

	// The schedule: check the zone on its own first, so that its error
	// names the timezone key rather than the schedule.
	tz, tzOK := t.str("timezone")
	if tzOK {
		task.Timezone = tz
		if _, err := schedule.LoadLocation(tz); err != nil {
			t.errorf("timezone", "%v", err)
			tzOK = false
		}
	} else if !t.has("timezone") {
		tzOK = true
	}
	zone := tz
	if !tzOK {
		zone = ""
	}
	task.Spec, task.Schedule = readSchedule(t, name, zone, tzOK)

	task.Plugin, task.Params = readPlugin(t, "[task.params]", PluginRef{Task: name})

	pol := resolvePolicy(t, readPolicy(t), defaults, task.Schedule)
	task.Lease, task.DoneTTL, task.MaxAttempts = pol.Lease, pol.DoneTTL, pol.MaxAttempts
	task.Timeout, task.Catchup, task.Deadline = pol.Timeout, pol.Catchup, pol.Deadline
	task.CatchupLimit = pol.CatchupLimit
	task.OutputTail = pol.OutputTail
	task.Concurrency = pol.Concurrency
	task.RetryBackoff = pol.RetryBackoff
	window := pol.Deadline // the slot window (scheduler.Task.Window); 0: unknown
	if window == 0 && task.Schedule != nil {
		window = task.Schedule.MaxGap()
	}
	task.Jitter = readJitter(t, window)
	if v, ok := m["paused"]; ok {
		if b, isBool := v.(bool); isBool {
			task.Paused = b
		} else {
			t.errorf("paused", "must be true or false, not %s", tomlType(v))
		}
	}
	task.OnFailure = readHook(t, hookScope(t.scope), name).or(defaultHook)
	return task, len(p.errs) == before
}
