package config

import (
	"errors"
	"strings"
	"testing"
)

// Parse asks its Checker about every plugin the file names, in file order,
// naming the task and the hook, and about the store once, with the valid
// tasks; the checker's errors are the file's, naming the file, task and
// key.
func TestCheckerIsAskedInFileOrder(t *testing.T) {
	c := &fakeChecker{}
	cfg, err := Parse([]byte(`
[defaults.on_failure]
plugin = "http"
[[task]]
name = "a"
schedule = "@hourly"
plugin = "exec"
[[task]]
name = "b"
schedule = "@hourly"
plugin = "config-test-noop"
params = { x = 1 }
  [task.on_failure]
  plugin = "exec"
`), "test.toml", nil, c)
	if err != nil {
		t.Fatal(err)
	}
	a, b := cfg.Tasks[0], cfg.Tasks[1]
	want := []PluginRef{
		{Task: "", Hook: a.OnFailure, Plugin: "http", Params: map[string]any{}},
		{Task: "a", Plugin: "exec", Params: map[string]any{}},
		{Task: "b", Plugin: noopPlugin, Params: map[string]any{"x": int64(1)}},
		{Task: "b", Hook: b.OnFailure, Plugin: "exec", Params: map[string]any{}},
	}
	if len(c.refs) != len(want) {
		t.Fatalf("asked about %d plugins, want %d: %+v", len(c.refs), len(want), c.refs)
	}
	for i, w := range want {
		g := c.refs[i]
		if g.Task != w.Task || g.Hook != w.Hook || g.Plugin != w.Plugin || len(g.Params) != len(w.Params) || g.Params["x"] != w.Params["x"] {
			t.Errorf("ref %d = %+v, want %+v", i, g, w)
		}
	}
	if a.OnFailure == nil || a.OnFailure == b.OnFailure {
		t.Errorf("hooks: a %p, b %p; want [defaults]' and b's own", a.OnFailure, b.OnFailure)
	}
	if len(c.stores) != 1 || c.stores[0] != cfg {
		t.Errorf("CheckStore called %d times", len(c.stores))
	}

	// A refusal of the store is an error of the file; the store is asked
	// even when the file has errors of its own, with the valid tasks only.
	c = &fakeChecker{store: errors.Join(errors.New(`task "a": concurrency: no`), errors.New(`task "b": on_failure: no`))}
	_, err = Parse([]byte("[log]\nlevel = \"loud\"\n"+minimal+"[[task]]\nname = \"bad\"\nschedule = \"@hourly\"\nplugin = \"exec\"\nlease = \"0s\"\n"), "test.toml", nil, c)
	lines := strings.Split(fmtErr(err), "\n")
	if len(lines) != 4 || lines[2] != `test.toml: task "a": concurrency: no` || lines[3] != `test.toml: task "b": on_failure: no` {
		t.Errorf("errors:\n%v", err)
	}
	if len(c.stores) != 1 || len(c.stores[0].Tasks) != 1 || c.stores[0].Tasks[0].Name != "report" {
		t.Errorf("CheckStore saw %+v, want the one valid task", c.stores)
	}

	// Without a Checker, plugin names and params go unchecked.
	if _, err := Parse([]byte("[[task]]\nname = \"x\"\nschedule = \"@hourly\"\nplugin = \"anything\"\nparams = { fail = 1 }\n"), "test.toml", nil, nil); err != nil {
		t.Errorf("no checker: %v", err)
	}
	if _, err := Parse([]byte("[[task]]\nname = \"x\"\nschedule = \"@hourly\"\n"), "test.toml", nil, nil); err == nil || !strings.Contains(err.Error(), `task "x" (task #1): plugin: required`) {
		t.Errorf("no checker, no plugin: %v", err)
	}
}

func fmtErr(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
