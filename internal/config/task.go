package config

import (
	"fmt"
	"log/slog"
	"regexp"
	"strings"

	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/scheduler"
	"github.com/slotd/slotd/scheduler/schedule"
	"github.com/slotd/slotd/tasks"
)

// taskNameRE is what a task name may look like: it is written inside the
// hash-tag braces of Redis keys ("slotd:{<task>:<slot id>}"), so no braces,
// colons or spaces.
var taskNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

func (c *Config) readTasks(top table, defaults rawPolicy, defaultHook rawHook, log *slog.Logger) {
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
		if t, ok := readTask(m, i+1, seen, defaults, defaultHook, top.p, log); ok {
			c.Tasks = append(c.Tasks, t)
		}
	}
}

// readTask validates the n-th [[task]] (1-based) and builds its job. It
// reports its problems to t.p and returns false if there were any.
func readTask(m map[string]any, n int, seen map[string]int, defaults rawPolicy, defaultHook rawHook, p *problems, log *slog.Logger) (scheduler.Task, bool) {
	before := len(p.errs)
	t := table{m: m, path: "task", p: p, scope: fmt.Sprintf("task #%d", n)}
	name, nameOK := t.str("name")
	if nameOK && name != "" {
		t.scope = fmt.Sprintf("task %q (task #%d)", name, n)
	}
	t.checkKeys(taskKeys)

	task := scheduler.Task{Name: name}
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

	task.Plugin, task.Params, task.Job = readPlugin(t, "[task.params]", log.With("task", name))

	pol := resolvePolicy(t, readPolicy(t), defaults, task.Schedule)
	task.Policy = lock.Policy{Lease: pol.Lease, DoneTTL: pol.DoneTTL, MaxAttempts: pol.MaxAttempts}
	task.Timeout, task.Catchup, task.Deadline = pol.Timeout, pol.Catchup, pol.Deadline
	task.CatchupLimit = pol.CatchupLimit
	task.OutputTail = pol.OutputTail
	task.Concurrency = pol.Concurrency
	if task.Schedule != nil || pol.Deadline > 0 {
		task.Jitter = readJitter(t, task.Window())
	} else {
		task.Jitter = readJitter(t, 0)
	}
	if v, ok := m["paused"]; ok {
		if b, isBool := v.(bool); isBool {
			task.Paused = b
		} else {
			t.errorf("paused", "must be true or false, not %s", tomlType(v))
		}
	}
	task.OnFailure = readHook(t, hookScope(t.scope), log.With("task", name, "hook", "on_failure")).or(defaultHook)
	return task, len(p.errs) == before
}

// readPlugin reads a table's plugin and params (named paramsTable in an
// error about their type) and builds the plugin's job, reporting each
// problem under its key. The job is nil when anything is wrong. Tasks and
// on_failure hooks read theirs alike.
func readPlugin(t table, paramsTable string, log *slog.Logger) (plugin string, params map[string]any, job tasks.Task) {
	params = map[string]any{}
	paramsOK := true
	if v, ok := t.m["params"]; ok {
		if pm, isTable := v.(map[string]any); isTable {
			params = pm
		} else {
			t.errorf("params", "must be a table (%s), not %s", paramsTable, tomlType(v))
			paramsOK = false
		}
	}
	plugin, pluginOK := t.str("plugin")
	switch {
	case !t.has("plugin"):
		t.errorf("plugin", "required (registered plugins: %s)", registered())
	case !pluginOK:
	default:
		factory, known := tasks.Lookup(plugin)
		if !known {
			t.errorf("plugin", "unknown plugin %q (registered plugins: %s)", plugin, registered())
		} else if paramsOK {
			var err error
			job, err = build(factory, plugin, params, log)
			// A factory may join one error per problem: one line each.
			for _, e := range splitJoined(err) {
				if e != nil {
					t.wrapf("params", e)
				}
			}
		}
	}
	return plugin, params, job
}

// build calls a plugin's factory, turning a panic into an error: no
// configuration may crash the daemon at load.
func build(factory tasks.Factory, plugin string, params map[string]any, log *slog.Logger) (job tasks.Task, err error) {
	defer func() {
		if r := recover(); r != nil {
			job, err = nil, fmt.Errorf("plugin %q panicked: %v", plugin, r)
		}
	}()
	job, err = factory(params, log)
	if err == nil && job == nil {
		err = fmt.Errorf("plugin %q returned no task", plugin)
	}
	return job, err
}

// splitJoined returns the errors that errors.Join joined into err, or err.
func splitJoined(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

func registered() string {
	names := tasks.Plugins()
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}
