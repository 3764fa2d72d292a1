package assemble

import (
	"strings"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/config"
)

const hookTasks = `
[[task]]
name = "inherits"
schedule = "@every 1m"
plugin = "exec"
  [task.params]
  command = ["/bin/true"]

[[task]]
name = "own"
schedule = "@every 1m"
plugin = "exec"
  [task.params]
  command = ["/bin/true"]
  [task.on_failure]
  plugin = "exec"
  timeout = "5s"
  [task.on_failure.params]
  command = ["/bin/echo", "own"]

[[task]]
name = "none"
schedule = "@every 1m"
plugin = "exec"
on_failure = false
  [task.params]
  command = ["/bin/true"]
`

// [defaults] on_failure is every task's hook unless the task has its own
// or opts out with false; the hook is built by its plugin at load.
func TestOnFailureHook(t *testing.T) {
	cfg := parse(t, `
[defaults.on_failure]
plugin = "http"
  [defaults.on_failure.params]
  url = "http://127.0.0.1:1/hook"
  method = "POST"
`+hookTasks)
	byName := map[string]int{}
	for i, task := range cfg.Tasks {
		byName[task.Name] = i
	}
	inh := cfg.Tasks[byName["inherits"]].OnFailure
	if inh == nil || inh.Plugin != "http" || inh.Timeout != config.DefaultHookTimeout || inh.Job == nil || inh.Params["method"] != "POST" {
		t.Errorf("inherited hook: %+v", inh)
	}
	own := cfg.Tasks[byName["own"]].OnFailure
	if own == nil || own.Plugin != "exec" || own.Timeout != 5*time.Second || own.Job == nil {
		t.Errorf("own hook: %+v", own)
	}
	if h := cfg.Tasks[byName["none"]].OnFailure; h != nil {
		t.Errorf("opted-out task has hook %+v", h)
	}
	if h := parse(t, hookTasks).Tasks[0].OnFailure; h != nil {
		t.Errorf("no default: the inheriting task has hook %+v", h)
	}
	two := parse(t, "[defaults.on_failure]\nplugin = \"exec\"\nparams = { command = [\"/bin/true\"] }\n"+minimal+
		"[[task]]\nname = \"second\"\nschedule = \"@hourly\"\nplugin = \"assemble-test-noop\"\n")
	if a, b := two.Tasks[0].OnFailure, two.Tasks[1].OnFailure; a == nil || a != b || a.Job == nil {
		t.Errorf("two tasks inheriting [defaults]' hook: %p and %p; want one, built once", a, b)
	}
}

// A bad hook is refused at load, naming the task (or [defaults]) and the key.
func TestOnFailureHookErrors(t *testing.T) {
	task := func(hook string) string {
		return `
[[task]]
name = "t"
schedule = "@every 1m"
plugin = "exec"
` + hook + `
  [task.params]
  command = ["/bin/true"]
`
	}
	for _, c := range []struct{ src, want string }{
		{task(`on_failure = true`), `task "t" (task #1): on_failure: true is not a hook`},
		{task(`on_failure = "page me"`), `task "t" (task #1): on_failure: must be a table`},
		{task(`on_failure = { plugin = "nope" }`), `task "t" (task #1): on_failure: plugin: unknown plugin "nope"`},
		{task(`on_failure = { params = { command = ["/bin/true"] } }`), `task "t" (task #1): on_failure: plugin: required`},
		{task(`on_failure = { plugin = "exec", timeout = "-1s", params = { command = ["/bin/true"] } }`), `task "t" (task #1): on_failure: timeout: -1s: must be positive`},
		{task(`on_failure = { plugin = "exec", retries = 3, params = { command = ["/bin/true"] } }`), `task "t" (task #1): on_failure: unknown key "retries"`},
		{task(`on_failure = { plugin = "http", params = { url = "ftp://x/" } }`), `task "t" (task #1): on_failure: params: tasks: http: parameter "url": scheme must be http or https`},
		{"[defaults.on_failure]\nplugin = \"exec\"\n" + task(""), `defaults.on_failure: params: `},
	} {
		_, err := Parse([]byte(c.src), "test.toml", nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("config:\n%s\nerror: %v\nwant it to contain %q", c.src, err, c.want)
		}
	}
}
