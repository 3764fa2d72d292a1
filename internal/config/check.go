package config

import (
	"slices"
	"strings"
)

// Checker checks what a file names but config does not know: it knows no
// plugin and opens no store. internal/assemble is the Checker of every
// command; Parse calls it in file order and reports its errors with the
// file's own, so that an operator still gets every problem at once.
type Checker interface {
	// Plugins returns the registered plugins' names, sorted.
	Plugins() []string
	// CheckPlugin checks a plugin, one of Plugins, with its params as its
	// factory would build it, returning one error per problem
	// (errors.Join); each is reported under the params key.
	CheckPlugin(ref PluginRef) error
	// CheckStore checks that the configured store can do what each task
	// asks of it. It is called once the file is read, with cfg's valid
	// tasks; each error names the task and the key.
	CheckStore(cfg *Config) error
}

// PluginRef is a plugin as a [[task]] or an on_failure table names it.
type PluginRef struct {
	Task   string         // the task; "" for the hook of [defaults]
	Hook   *Hook          // the hook whose plugin it is (still being read: a key, no more); nil for a task's own
	Plugin string         // the plugin's name
	Params map[string]any // its params; never nil
}

// readPlugin reads a table's plugin and params (named paramsTable in an
// error about their type) and has check check them, reporting each
// problem under its key. Tasks and on_failure hooks read theirs alike.
func readPlugin(t table, paramsTable string, ref PluginRef) (plugin string, params map[string]any) {
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
	check := t.p.check
	switch {
	case !t.has("plugin") && check == nil:
		t.errorf("plugin", "required")
	case !t.has("plugin"):
		t.errorf("plugin", "required (registered plugins: %s)", registered(check))
	case !pluginOK, check == nil:
	case !slices.Contains(check.Plugins(), plugin):
		t.errorf("plugin", "unknown plugin %q (registered plugins: %s)", plugin, registered(check))
	case paramsOK:
		ref.Plugin, ref.Params = plugin, params
		// A plugin may join one error per problem: one line each.
		for _, e := range splitJoined(check.CheckPlugin(ref)) {
			if e != nil {
				t.wrapf("params", e)
			}
		}
	}
	return plugin, params
}

// splitJoined returns the errors that errors.Join joined into err, or err.
func splitJoined(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

func registered(check Checker) string {
	names := check.Plugins()
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}
