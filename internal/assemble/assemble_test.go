package assemble

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/config"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/scheduler"
	"github.com/slotd/slotd/scheduler/history"
	"github.com/slotd/slotd/tasks"
)

// Test plugins, registered under names no other package uses.
const (
	noopPlugin   = "assemble-test-noop"   // accepts any params
	strictPlugin = "assemble-test-strict" // rejects params.fail
	panicPlugin  = "assemble-test-panic"  // its factory panics
	nilPlugin    = "assemble-test-nil"    // its factory returns no task
)

func init() {
	tasks.Register(noopPlugin, func(params map[string]any, log *slog.Logger) (tasks.Task, error) {
		log.Debug("built", "params", len(params))
		return tasks.TaskFunc(func(context.Context) error { return nil }), nil
	})
	tasks.Register(strictPlugin, func(params map[string]any, _ *slog.Logger) (tasks.Task, error) {
		if _, bad := params["fail"]; bad {
			return nil, errors.New(`parameter "fail" is not allowed`)
		}
		return tasks.TaskFunc(func(context.Context) error { return nil }), nil
	})
	tasks.Register(panicPlugin, func(map[string]any, *slog.Logger) (tasks.Task, error) {
		panic("boom")
	})
	tasks.Register(nilPlugin, func(map[string]any, *slog.Logger) (tasks.Task, error) {
		return nil, nil
	})
}

const minimal = `
[[task]]
name = "report"
schedule = "0 * * * *"
plugin = "assemble-test-noop"
`

func parse(t *testing.T, src string) *Daemon {
	t.Helper()
	d, err := Parse([]byte(src), "test.toml", nil)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return d
}

// Every task is the engine's as configured: its policy, enums, schedule,
// job, window and deadlines.
func TestTasksAsTheEngineRunsThem(t *testing.T) {
	d := parse(t, `
[defaults]
lease = "20s"
catchup = "none"
[[task]]
name = "report"
schedule = "0 * * * *"
plugin = "assemble-test-noop"
[[task]]
name = "paris"
schedule = "0 9 * * 1"
timezone = "Europe/Paris"
plugin = "assemble-test-noop"
lease = "1s"
done_ttl = "216h"
max_attempts = 999
timeout = "2h"
catchup = "latest"
catchup_limit = "3h"
deadline = "10m"
output_tail = 0
paused = true
concurrency = "replace"
params = { command = ["/bin/true"] }
`)
	if len(d.Tasks) != 2 || d.Tasks[0].Name != "report" || d.Tasks[1].Name != "paris" {
		t.Fatalf("tasks %+v", d.Tasks)
	}
	r := d.Tasks[0]
	if r.Policy != (lock.Policy{Lease: 20 * time.Second, DoneTTL: 48 * time.Hour, MaxAttempts: 3}) || r.Timeout != time.Hour ||
		r.Catchup != scheduler.CatchupNone || r.Concurrency != scheduler.ConcurrencyAllow || r.Paused || r.Job == nil ||
		r.CatchupLimit != config.DefaultCatchupLimit || r.OutputTail != config.DefaultOutputTail || r.Params == nil {
		t.Errorf("report = %+v", r)
	}
	if r.Window() != time.Hour {
		t.Errorf("report: Window() = %v", r.Window())
	}
	if got := r.SlotDeadline(utc("2024-01-15T14:00:00Z")); !got.Equal(utc("2024-01-15T15:00:00Z")) {
		t.Errorf("report: SlotDeadline(14:00) = %v, want 15:00", got)
	}
	p := d.Tasks[1]
	if p.Policy != (lock.Policy{Lease: time.Second, DoneTTL: 9 * 24 * time.Hour, MaxAttempts: 999}) || p.Timeout != 2*time.Hour ||
		p.Catchup != scheduler.CatchupLatest || p.CatchupLimit != 3*time.Hour || p.Deadline != 10*time.Minute ||
		p.OutputTail != 0 || !p.Paused || p.Concurrency != scheduler.ConcurrencyReplace || p.Job == nil ||
		p.Timezone != "Europe/Paris" || p.Spec != "0 9 * * 1" || p.Plugin != noopPlugin || p.Schedule != d.Config.Tasks[1].Schedule {
		t.Errorf("paris = %+v", p)
	}
	if p.Window() != 10*time.Minute {
		t.Errorf("paris: Window() = %v", p.Window())
	}
	slot := utc("2024-01-15T08:00:00Z") // 09:00 in Paris
	if got := p.SlotDeadline(slot); !got.Equal(slot.Add(10 * time.Minute)) {
		t.Errorf("paris: SlotDeadline = %v", got)
	}
}

// Every field of config.Task reaches scheduler.Task under its name: a key
// added to the one and not carried to the other fails here.
func TestEveryTaskFieldIsCarried(t *testing.T) {
	carried := map[string]string{ // config.Task field → scheduler.Task field, where they differ
		"Lease": "Policy", "DoneTTL": "Policy", "MaxAttempts": "Policy",
	}
	ct, st := reflect.TypeFor[config.Task](), reflect.TypeFor[scheduler.Task]()
	for i := range ct.NumField() {
		name := ct.Field(i).Name
		if to, ok := carried[name]; ok {
			name = to
		}
		if _, ok := st.FieldByName(name); !ok {
			t.Errorf("config.Task.%s has no scheduler.Task field", ct.Field(i).Name)
		}
	}
	// And the values arrive: every field of a task set away from its zero
	// value is set away from it in the engine's.
	d := parse(t, "[[task]]\nname = \"x\"\nschedule = \"@hourly\"\ntimezone = \"UTC\"\nplugin = \"assemble-test-noop\"\n"+
		"deadline = \"1m\"\njitter = \"10s\"\npaused = true\nconcurrency = \"forbid\"\nparams = { a = 1 }\n"+
		"retry_backoff = { initial = \"5s\" }\n"+
		"on_failure = { plugin = \"assemble-test-noop\" }\n")
	cv, sv := reflect.ValueOf(d.Config.Tasks[0]), reflect.ValueOf(d.Tasks[0])
	for i := range ct.NumField() {
		name := ct.Field(i).Name
		if to, ok := carried[name]; ok {
			name = to
		}
		if !cv.Field(i).IsZero() && sv.FieldByName(name).IsZero() {
			t.Errorf("config.Task.%s is set, scheduler.Task.%s is not", ct.Field(i).Name, name)
		}
	}
}

// The enums map one to one, by name.
func TestEnumsMapByName(t *testing.T) {
	for _, c := range []config.Catchup{config.CatchupNone, config.CatchupLatest} {
		if got := catchup(c); got.String() != c.String() {
			t.Errorf("catchup %v became %v", c, got)
		}
	}
	for _, c := range []config.Concurrency{config.ConcurrencyAllow, config.ConcurrencyForbid, config.ConcurrencyReplace} {
		if got := concurrency(c); got.String() != c.String() {
			t.Errorf("concurrency %v became %v", c, got)
		}
	}
}

// The configuration's defaults and bounds are the engine's own.
func TestConfigDefaultsAreTheEngines(t *testing.T) {
	for _, c := range []struct {
		name        string
		config, eng any
	}{
		{"shutdown grace", config.DefaultShutdownGrace, scheduler.DefaultShutdownGrace},
		{"max clock skew", config.DefaultMaxClockSkew, scheduler.DefaultMaxClockSkew},
		{"max hooks", config.DefaultMaxHooks, scheduler.DefaultMaxHooks},
		{"replica", config.DefaultReplica(), scheduler.DefaultReplica()},
		{"attempt cap", config.MaxAttemptsLimit, lock.MaxAttempts},
		{"output tail", config.DefaultOutputTail, tasks.DefaultOutputTail},
		{"output tail bound", config.MaxOutputTail, tasks.MaxOutputTail},
		{"history output bound", history.MaxOutput, tasks.MaxOutputTail},
		{"http pool", tasks.HTTPPool(config.DefaultHTTPPool), tasks.DefaultHTTPPool},
		{"http pool bound", config.MaxHTTPMaxIdlePerHost, tasks.MaxHTTPMaxIdlePerHost},
	} {
		if c.config != c.eng {
			t.Errorf("%s: config %v, engine %v", c.name, c.config, c.eng)
		}
	}
	d := parse(t, "[plugins.http]\nmax_idle_per_host = 1000\nidle_timeout = \"5m\"\nmax_conns_per_host = 512\n"+minimal)
	if want := (tasks.HTTPPool{MaxIdlePerHost: 1000, IdleTimeout: 5 * time.Minute, MaxConnsPerHost: 512}); d.HTTPPool != want {
		t.Errorf("pool %+v, want %+v", d.HTTPPool, want)
	}
}

func TestFactoryGetsParamsAndScopedLogger(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	_, err := Parse([]byte(minimal+"  [task.params]\n  a = 1\n  b = 2\n[defaults.on_failure]\nplugin = \"assemble-test-noop\"\n"), "x", log)
	if err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if !strings.Contains(out, "task=report params=2") {
		t.Errorf("factory log = %q, want task=report and params=2", out)
	}
	if !strings.Contains(out, "hook=on_failure params=0") || strings.Count(out, "msg=built") != 2 {
		t.Errorf("factory log = %q, want the default hook's built once, with hook=on_failure", out)
	}
}

// Plugin problems are the file's problems: named by the file, task and
// key, reported with the others, a panicking factory included.
func TestPluginErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		src  string
		want []string
	}{
		{"plugin missing", "[[task]]\nname = \"report\"\nschedule = \"@daily\"\n", []string{`task "report" (task #1): plugin: required`, noopPlugin, "exec", "http"}},
		{"plugin unknown", "[[task]]\nname = \"report\"\nschedule = \"@daily\"\nplugin = \"shell\"\n", []string{`task "report" (task #1): plugin: unknown plugin "shell"`, noopPlugin, strictPlugin}},
		{"params rejected", "[[task]]\nname = \"report\"\nschedule = \"@daily\"\nplugin = \"assemble-test-strict\"\n[task.params]\nfail = true\n",
			[]string{`task "report" (task #1): params: parameter "fail" is not allowed`}},
		{"factory panics", "[[task]]\nname = \"report\"\nschedule = \"@daily\"\nplugin = \"assemble-test-panic\"\n", []string{`task "report" (task #1): params: plugin "assemble-test-panic" panicked: boom`}},
		{"factory returns nothing", "[[task]]\nname = \"report\"\nschedule = \"@daily\"\nplugin = \"assemble-test-nil\"\n", []string{`task "report" (task #1): params: plugin "assemble-test-nil" returned no task`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Parse([]byte(tc.src), "test.toml", nil)
			if err == nil || d != nil {
				t.Fatalf("daemon %v, err %v; want only an error", d, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\ndoes not contain %q", err, w)
				}
			}
			for _, line := range strings.Split(err.Error(), "\n") {
				if !strings.HasPrefix(line, "test.toml: ") {
					t.Errorf("error line %q does not start with the source", line)
				}
			}
		})
	}
}

// One pass reports every problem, the plugins' with the file's, in file
// order.
func TestEveryProblemAtOnce(t *testing.T) {
	_, err := Parse([]byte(`
[daemon]
shutdown_grace = "soon"
[defaults]
lease = "5x"

[[task]]
name = "a"
schedule = "bad spec"
plugin = "nope"

[[task]]
name = "b"
schedule = "@daily"
plugin = "assemble-test-strict"
max_attempts = 0
params = { fail = 1 }

[[task]]
name = "c"
schedule = "@daily"
plugin = "exec"
concurrency = "forbid"
params = { command = ["true"] }

[redis]
redlock = ["redis://127.0.0.1:1", "redis://127.0.0.1:2", "redis://127.0.0.1:3"]
`), "multi.toml", nil)
	want := []string{
		"multi.toml: daemon.shutdown_grace",
		"multi.toml: defaults.lease",
		`multi.toml: task "a" (task #1): schedule:`,
		`multi.toml: task "a" (task #1): plugin: unknown plugin "nope"`,
		`multi.toml: task "b" (task #2): params: parameter "fail" is not allowed`,
		`multi.toml: task "b" (task #2): max_attempts:`,
	}
	lines := strings.Split(fmtErr(err), "\n")
	if len(lines) != len(want) {
		t.Fatalf("%d errors, want %d:\n%v", len(lines), len(want), err)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("error %d = %q, want %q...", i+1, lines[i], w)
		}
	}
}

// The sample configuration at the repository root loads as shipped, and
// its commented-out http example too.
func TestSampleConfig(t *testing.T) {
	d, err := Load(filepath.Join("..", "..", "config.toml"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if d.Config.RedisURL != "" {
		t.Errorf("the sample uses Redis at %q; it must run on the embedded store", d.Config.RedisURL)
	}
	if len(d.Tasks) < 2 {
		t.Fatalf("%d tasks", len(d.Tasks))
	}
	for _, task := range d.Tasks {
		if task.Job == nil || task.Plugin != "exec" {
			t.Errorf("task %q: plugin %q, job %v", task.Name, task.Plugin, task.Job)
		}
	}
	data, err := os.ReadFile(filepath.Join("..", "..", "config.toml"))
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(data, []byte("# [[task]]\n# name = \"ping-api\""))
	if i < 0 {
		t.Fatal("no commented-out ping-api task in config.toml")
	}
	example := string(data[:i])
	for _, line := range strings.SplitAfter(string(data[i:]), "\n") {
		example += strings.TrimPrefix(line, "# ")
	}
	d, err = Parse([]byte(example), "config.toml with ping-api", nil)
	if err != nil {
		t.Fatal(err)
	}
	if last := d.Tasks[len(d.Tasks)-1]; last.Name != "ping-api" || last.Plugin != "http" || last.Job == nil {
		t.Errorf("last task = %q (%s)", last.Name, last.Plugin)
	}
}

func fmtErr(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t.UTC()
}
