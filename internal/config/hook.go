package config

import (
	"fmt"
	"time"
)

// Hook is an on_failure hook: a plugin run once per slot that ends
// exhausted or missed. internal/assemble builds the engine's
// scheduler.Hook from it.
type Hook struct {
	Plugin  string         // the registered plugin's name
	Params  map[string]any // its params; never nil
	Timeout time.Duration  // bounds one run of the hook; > 0
}

// DefaultHookTimeout bounds one run of an on_failure hook unless its
// timeout key says otherwise.
const DefaultHookTimeout = 30 * time.Second

// hookKeys are the keys of an on_failure table.
var hookKeys = []string{"plugin", "params", "timeout"}

// rawHook is an on_failure key as written, in [defaults] or a [[task]]:
// absent, off (false: a task opting out of the default's), or a hook.
type rawHook struct {
	set, off bool
	hook     *Hook // nil when off, absent or invalid (reported)
	bad      bool
}

// or is the task's hook over the default's.
func (h rawHook) or(def rawHook) *Hook {
	if h.set {
		return h.hook
	}
	return def.hook
}

// readHook reads the on_failure key of t — a table naming a plugin (with
// its params and a timeout), or false — and has its plugin checked; scope
// names it in errors ("defaults.on_failure", `task "x" (task #1):
// on_failure`), and task is the task's name ("" in [defaults]).
func readHook(t table, scope, task string) rawHook {
	v, ok := t.m["on_failure"]
	if !ok {
		return rawHook{}
	}
	switch v := v.(type) {
	case bool:
		if v {
			t.errorf("on_failure", "true is not a hook: write an [on_failure] table with a plugin, or false for none")
			return rawHook{set: true, bad: true}
		}
		return rawHook{set: true, off: true}
	case map[string]any:
		return buildHook(table{m: v, p: t.p, scope: scope}, task)
	default:
		t.errorf("on_failure", "must be a table (with plugin, params, timeout) or false, not %s", tomlType(v))
		return rawHook{set: true, bad: true}
	}
}

func buildHook(t table, task string) rawHook {
	before := len(t.p.errs)
	t.checkKeys(hookKeys)
	h := &Hook{Params: map[string]any{}, Timeout: DefaultHookTimeout}
	if d, ok := t.positive("timeout"); ok {
		h.Timeout = d
	}
	h.Plugin, h.Params = readPlugin(t, "[on_failure.params]", PluginRef{Task: task, Hook: h})
	if len(t.p.errs) != before {
		return rawHook{set: true, bad: true}
	}
	return rawHook{set: true, hook: h}
}

// hookScope is how errors name a task's on_failure table.
func hookScope(taskScope string) string { return fmt.Sprintf("%s: on_failure", taskScope) }
