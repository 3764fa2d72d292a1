package config

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/slotd/slotd/scheduler"
)

// DefaultHookTimeout bounds one run of an on_failure hook unless its
// timeout key says otherwise.
const DefaultHookTimeout = 30 * time.Second

// hookKeys are the keys of an on_failure table.
var hookKeys = []string{"plugin", "params", "timeout"}

// rawHook is an on_failure key as written, in [defaults] or a [[task]]:
// absent, off (false: a task opting out of the default's), or a hook.
type rawHook struct {
	set, off bool
	hook     *scheduler.Hook // nil when off, absent or invalid (reported)
	bad      bool
}

// or is the task's hook over the default's.
func (h rawHook) or(def rawHook) *scheduler.Hook {
	if h.set {
		return h.hook
	}
	return def.hook
}

// readHook reads the on_failure key of t — a table naming a plugin (with
// its params and a timeout), or false — and builds the hook's task with
// the plugin's factory; scope names it in errors ("defaults.on_failure",
// `task "x" (task #1): on_failure`).
func readHook(t table, scope string, log *slog.Logger) rawHook {
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
		return buildHook(table{m: v, p: t.p, scope: scope}, log)
	default:
		t.errorf("on_failure", "must be a table (with plugin, params, timeout) or false, not %s", tomlType(v))
		return rawHook{set: true, bad: true}
	}
}

func buildHook(t table, log *slog.Logger) rawHook {
	before := len(t.p.errs)
	t.checkKeys(hookKeys)
	h := &scheduler.Hook{Params: map[string]any{}, Timeout: DefaultHookTimeout}
	if d, ok := t.positive("timeout"); ok {
		h.Timeout = d
	}
	h.Plugin, h.Params, h.Job = readPlugin(t, "[on_failure.params]", log)
	if len(t.p.errs) != before {
		return rawHook{set: true, bad: true}
	}
	return rawHook{set: true, hook: h}
}

// hookScope is how errors name a task's on_failure table.
func hookScope(taskScope string) string { return fmt.Sprintf("%s: on_failure", taskScope) }
