package config

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/slotd/slotd/scheduler/schedule"
)

// Test plugins: the names config's tests check files against.
const (
	noopPlugin   = "config-test-noop"   // accepts any params
	strictPlugin = "config-test-strict" // rejects params.fail
)

// testPlugins stands in for the plugin registry (internal/assemble's
// tests check files against the real one): the test plugins, and exec and
// http with any params.
var testPlugins = &fakeChecker{}

// fakeChecker is a Checker that records what it is asked.
type fakeChecker struct {
	refs   []PluginRef
	stores []*Config
	store  error // CheckStore's answer
}

func (*fakeChecker) Plugins() []string {
	return []string{noopPlugin, strictPlugin, "exec", "http"}
}

func (c *fakeChecker) CheckPlugin(ref PluginRef) error {
	if c != testPlugins { // testPlugins is shared by parallel tests: no record
		c.refs = append(c.refs, ref)
	}
	if _, bad := ref.Params["fail"]; bad && ref.Plugin == strictPlugin {
		return errors.Join(errors.New(`parameter "fail" is not allowed`), errors.New("and a second problem"))
	}
	return nil
}

func (c *fakeChecker) CheckStore(cfg *Config) error {
	if c != testPlugins {
		c.stores = append(c.stores, cfg)
	}
	return c.store
}

const minimal = `
[[task]]
name = "report"
schedule = "0 * * * *"
plugin = "config-test-noop"
`

func parse(t *testing.T, src string) *Config {
	t.Helper()
	cfg, err := Parse([]byte(src), "test.toml", nil, testPlugins)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return cfg
}

func TestParseConfigDefaults(t *testing.T) {
	cfg := parse(t, minimal)
	host, _ := os.Hostname()
	switch {
	case cfg.Source != "test.toml":
		t.Errorf("Source = %q", cfg.Source)
	case !strings.HasSuffix(cfg.Replica, "-"+itoa(os.Getpid())) || (host != "" && !strings.HasPrefix(cfg.Replica, host)):
		t.Errorf("Replica = %q, want <hostname>-<pid>", cfg.Replica)
	case cfg.ShutdownGrace != 30*time.Second, cfg.MaxClockSkew != time.Second, cfg.MaxHooks != 8:
		t.Errorf("ShutdownGrace, MaxClockSkew, MaxHooks = %v, %v, %d", cfg.ShutdownGrace, cfg.MaxClockSkew, cfg.MaxHooks)
	case cfg.RedisURL != "", cfg.Prefix != "slotd", cfg.Listen != "127.0.0.1:9464":
		t.Errorf("RedisURL, Prefix, Listen = %q, %q, %q", cfg.RedisURL, cfg.Prefix, cfg.Listen)
	case cfg.LogLevel != slog.LevelInfo, cfg.LogFormat != "auto":
		t.Errorf("LogLevel, LogFormat = %v, %q", cfg.LogLevel, cfg.LogFormat)
	}
	if len(cfg.Tasks) != 1 {
		t.Fatalf("%d tasks", len(cfg.Tasks))
	}
	task := cfg.Tasks[0]
	want := taskPolicy{Lease: 15 * time.Second, DoneTTL: 48 * time.Hour, MaxAttempts: 3, Timeout: time.Hour, Catchup: CatchupLatest}
	if got := policyOf(task); got != want {
		t.Errorf("Policy = %+v, want %+v", got, want)
	}
	switch {
	case task.Name != "report", task.Spec != "0 * * * *", task.Timezone != "", task.Plugin != noopPlugin:
		t.Errorf("task = %+v", task)
	case task.Params == nil || len(task.Params) != 0:
		t.Errorf("Params = %#v, want an empty map", task.Params)
	case task.Schedule == nil || task.Schedule.MaxGap() != time.Hour:
		t.Errorf("Schedule = %v", task.Schedule)
	case task.Concurrency != ConcurrencyAllow, task.OnFailure != nil, task.CatchupLimit != DefaultCatchupLimit, task.OutputTail != DefaultOutputTail:
		t.Errorf("task = %+v", task)
	}
}

func itoa(n int) string {
	var b []byte
	for {
		b = append([]byte{byte('0' + n%10)}, b...)
		if n /= 10; n == 0 {
			return string(b)
		}
	}
}

func TestParseConfigEverything(t *testing.T) {
	cfg := parse(t, `
[daemon]
replica = "node-1"
shutdown_grace = "45s"
max_clock_skew = "250ms"
max_hooks = 3

[redis]
url = "redis://:pw@redis.internal:6379/2"
prefix = "jobs"

[http]
listen = ":9000"

[log]
level = "DEBUG"
format = "json"

[defaults]
lease = "20s"
done_ttl = "72h"
max_attempts = 5
timeout = "30m"
catchup = "none"

[[task]]
name = "inherits"
schedule = "@daily"
plugin = "config-test-noop"

[[task]]
name = "overrides.all_of-it"
schedule = "0 9 * * 1"
timezone = "Europe/Paris"
plugin = "config-test-noop"
lease = "1s"
done_ttl = "216h"
max_attempts = 999
timeout = "2h"
catchup = "latest"
deadline = "10m"
  [task.params]
  command = ["/bin/true"]
  nested = { deep = [1, 2] }

[[task]]
name = "weekly"
schedule = "@weekly"
plugin = "config-test-noop"
done_ttl = "200h"
`)
	if cfg.Replica != "node-1" || cfg.ShutdownGrace != 45*time.Second || cfg.MaxClockSkew != 250*time.Millisecond || cfg.MaxHooks != 3 ||
		cfg.RedisURL != "redis://:pw@redis.internal:6379/2" || cfg.Prefix != "jobs" || cfg.Listen != ":9000" ||
		cfg.LogLevel != slog.LevelDebug || cfg.LogFormat != "json" {
		t.Errorf("daemon settings = %+v", cfg)
	}
	names := []string{}
	for _, task := range cfg.Tasks {
		names = append(names, task.Name)
	}
	if !slices.Equal(names, []string{"inherits", "overrides.all_of-it", "weekly"}) {
		t.Fatalf("tasks in order %q", names)
	}

	inherits := policyOf(cfg.Tasks[0])
	if want := (taskPolicy{Lease: 20 * time.Second, DoneTTL: 72 * time.Hour, MaxAttempts: 5, Timeout: 30 * time.Minute, Catchup: CatchupNone}); inherits != want {
		t.Errorf("inherited policy = %+v, want %+v", inherits, want)
	}

	o := cfg.Tasks[1]
	if want := (taskPolicy{Lease: time.Second, DoneTTL: 9 * 24 * time.Hour, MaxAttempts: 999, Timeout: 2 * time.Hour, Catchup: CatchupLatest, Deadline: 10 * time.Minute}); policyOf(o) != want {
		t.Errorf("overridden policy = %+v, want %+v", policyOf(o), want)
	}
	if o.Timezone != "Europe/Paris" || o.Schedule.String() != "0 9 * * 1 in Europe/Paris" {
		t.Errorf("timezone %q, schedule %v", o.Timezone, o.Schedule)
	}
	if cmd, ok := o.Params["command"].([]any); !ok || len(cmd) != 1 || cmd[0] != "/bin/true" {
		t.Errorf("params = %#v", o.Params)
	}

	// The weekly task's window is a week, longer than the default done_ttl.
	if w := cfg.Tasks[2]; w.Schedule.MaxGap() != 7*24*time.Hour || w.DoneTTL != 200*time.Hour {
		t.Errorf("weekly: window %v, done_ttl %v", w.Schedule.MaxGap(), w.DoneTTL)
	}
}

func TestDoneTTLDefaultCoversWindow(t *testing.T) {
	for _, tc := range []struct {
		extra string
		want  time.Duration
	}{
		{`schedule = "0 * * * *"`, 48 * time.Hour},
		{`schedule = "@weekly"`, 7 * 24 * time.Hour},
		{`schedule = "@monthly"`, 31 * 24 * time.Hour},
		{"schedule = \"@monthly\"\ndeadline = \"1h\"", 48 * time.Hour},
		{"schedule = \"@every 1m\"\ndeadline = \"100h\"", 100 * time.Hour},
		// Dense schedules keep their last 10,000 slots' markers, not 48h's.
		{`schedule = "@every 1s"`, 10_000 * time.Second},
		{`schedule = "@every 10s"`, 100_000 * time.Second},
		{`schedule = "@every 17s"`, 170_000 * time.Second},
		{`schedule = "@every 18s"`, 48 * time.Hour},
		{`schedule = "*/30 * * * * *"`, 10_000 * time.Second},
		{`schedule = "* * * * *"`, 48 * time.Hour},
		{"schedule = \"@every 1s\"\ndeadline = \"5h\"", 5 * time.Hour},
	} {
		cfg := parse(t, "[[task]]\nname = \"t\"\nplugin = \"config-test-noop\"\n"+tc.extra)
		if got := cfg.Tasks[0].DoneTTL; got != tc.want {
			t.Errorf("%s: DoneTTL = %v, want %v", tc.extra, got, tc.want)
		}
	}
}

func TestParseConfigErrors(t *testing.T) {
	task := func(body string) string {
		return "[[task]]\nname = \"report\"\nschedule = \"0 * * * *\"\nplugin = \"config-test-noop\"\n" + body
	}
	for _, tc := range []struct {
		name string
		src  string
		want []string // every one must appear in the error
	}{
		{"syntax", "[daemon]\nreplica = \n", []string{"test.toml: line 2"}},
		{"unknown top-level key", "colour = \"blue\"\n" + minimal, []string{`unknown key "colour"`}},
		{"unknown section", "[deamon]\nreplica = \"x\"\n" + minimal, []string{`unknown key "deamon"`}},
		{"unknown daemon key", "[daemon]\nreplicas = \"x\"\n" + minimal, []string{`unknown key "daemon.replicas"`, "replica, shutdown_grace"}},
		{"keys are case-sensitive", "[defaults]\nLease = \"5s\"\n" + minimal, []string{`unknown key "defaults.Lease"`}},
		{"unknown task key", task("retries = 3\n"), []string{`task "report" (task #1): unknown key "task.retries"`}},
		{"unknown task table", task("[task.extra]\nx = 1\n"), []string{`task "report" (task #1): unknown key "task.extra"`}},
		{"daemon not a table", "daemon = 5\n" + minimal, []string{"daemon: must be a table"}},
		{"task not an array", "[task]\nname = \"x\"\n", []string{"task: must be an array of tables", "[[task]]"}},
		{"task array of values", "task = [1, 2]\n", []string{"task: must be an array of tables"}},

		{"replica whitespace", "[daemon]\nreplica = \"my node\"\n" + minimal, []string{"daemon.replica", "whitespace"}},
		{"replica too long", "[daemon]\nreplica = \"" + strings.Repeat("r", 129) + "\"\n" + minimal, []string{"daemon.replica", "128 bytes"}},
		{"replica not a string", "[daemon]\nreplica = 7\n" + minimal, []string{"daemon.replica", "must be a string, not the integer 7"}},
		{"shutdown_grace bad", "[daemon]\nshutdown_grace = \"30\"\n" + minimal, []string{"daemon.shutdown_grace", `"30": invalid duration`}},
		{"shutdown_grace zero", "[daemon]\nshutdown_grace = \"0s\"\n" + minimal, []string{"daemon.shutdown_grace", "must be positive"}},
		{"max_clock_skew negative", "[daemon]\nmax_clock_skew = \"-1s\"\n" + minimal, []string{"daemon.max_clock_skew", "must be positive"}},
		{"max_hooks zero", "[daemon]\nmax_hooks = 0\n" + minimal, []string{"daemon.max_hooks", "0 is out of range: want 1 to 10000"}},
		{"max_hooks a string", "[daemon]\nmax_hooks = \"8\"\n" + minimal, []string{"daemon.max_hooks", "must be an integer"}},
		{"duration as integer", "[daemon]\nshutdown_grace = 30\n" + minimal, []string{"daemon.shutdown_grace", "duration string", "the integer 30"}},
		{"redis url scheme", "[redis]\nurl = \"http://localhost\"\n" + minimal, []string{"redis.url", "invalid Redis URL"}},
		{"prefix empty", "[redis]\nprefix = \"\"\n" + minimal, []string{"redis.prefix", "empty"}},
		{"prefix braces", "[redis]\nprefix = \"a{b}\"\n" + minimal, []string{"redis.prefix", "braces"}},
		{"prefix space", "[redis]\nprefix = \"a b\"\n" + minimal, []string{"redis.prefix", "whitespace"}},
		{"listen garbage", "[http]\nlisten = \"9464\"\n" + minimal, []string{"http.listen", "host:port", `"off"`}},
		{"listen port", "[http]\nlisten = \"localhost:99999\"\n" + minimal, []string{"http.listen", "port"}},
		{"log level", "[log]\nlevel = \"verbose\"\n" + minimal, []string{"log.level", `"verbose"`, "debug, info, warn or error"}},
		{"log format", "[log]\nformat = \"xml\"\n" + minimal, []string{"log.format", `"xml"`}},

		{"defaults lease bad", "[defaults]\nlease = \"5x\"\n" + minimal, []string{"defaults.lease", `"5x": invalid duration`}},
		{"defaults lease short", "[defaults]\nlease = \"500ms\"\n" + minimal, []string{"defaults.lease", "shorter than 1s", "lease/3"}},
		{"defaults max_attempts zero", "[defaults]\nmax_attempts = 0\n" + minimal, []string{"defaults.max_attempts", "1 to 999"}},
		{"defaults max_attempts 1000", "[defaults]\nmax_attempts = 1000\n" + minimal, []string{"defaults.max_attempts", "fencing token"}},
		{"defaults catchup", "[defaults]\ncatchup = \"all\"\n" + minimal, []string{"defaults.catchup", `"all"`, `"latest" or "none"`}},
		{"defaults timeout zero", "[defaults]\ntimeout = \"0s\"\n" + minimal, []string{"defaults.timeout", "must be positive"}},
		{"defaults deadline zero", "[defaults]\ndeadline = \"0s\"\n" + minimal, []string{"defaults.deadline", "must be positive"}},
		{"defaults done_ttl short", "[defaults]\ndone_ttl = \"30m\"\n" + minimal,
			[]string{`task "report" (task #1): done_ttl: 30m0s (from [defaults]) is shorter than the slot window 1h0m0s`, "raise done_ttl or set deadline"}},

		{"task lease bad", task("lease = \"5x\"\n"), []string{`task "report" (task #1): lease: "5x": invalid duration`}},
		{"task lease short", task("lease = \"999ms\"\n"), []string{`task "report" (task #1): lease:`, "shorter than 1s"}},
		{"task lease longer than done_ttl", task("lease = \"2h\"\ndone_ttl = \"1h\"\n"), []string{`task "report" (task #1): lease: 2h0m0s is longer than done_ttl 1h0m0s`}},
		{"task done_ttl short", task("done_ttl = \"59m\"\n"), []string{`task "report" (task #1): done_ttl: 59m0s is shorter than the slot window 1h0m0s`}},
		{"task deadline past done_ttl", task("deadline = \"3h\"\ndone_ttl = \"2h\"\n"), []string{`task "report" (task #1): done_ttl: 2h0m0s is shorter than deadline 3h0m0s`}},
		{"task deadline negative", task("deadline = \"-1m\"\n"), []string{`task "report" (task #1): deadline:`, "must be positive"}},
		{"task timeout bad", task("timeout = \"forever\"\n"), []string{`task "report" (task #1): timeout: "forever": invalid duration`}},
		{"task max_attempts string", task("max_attempts = \"3\"\n"), []string{`task "report" (task #1): max_attempts: must be an integer, not the string "3"`}},
		{"task max_attempts float", task("max_attempts = 2.5\n"), []string{`task "report" (task #1): max_attempts: must be an integer`}},
		{"task catchup", task("catchup = \"latest \"\n"), []string{`task "report" (task #1): catchup:`}},

		{"name missing", "[[task]]\nschedule = \"@daily\"\nplugin = \"config-test-noop\"\n", []string{"task #1: name: required"}},
		{"name empty", "[[task]]\nname = \"\"\nschedule = \"@daily\"\nplugin = \"config-test-noop\"\n", []string{"task #1: name: required"}},
		{"name spaces", "[[task]]\nname = \"my report\"\nschedule = \"@daily\"\nplugin = \"config-test-noop\"\n", []string{`task "my report" (task #1): name:`, "hash-tag braces", "^[A-Za-z0-9]"}},
		{"name braces", "[[task]]\nname = \"a}b\"\nschedule = \"@daily\"\nplugin = \"config-test-noop\"\n", []string{`task "a}b" (task #1): name:`, "Redis keys"}},
		{"name colon", "[[task]]\nname = \"a:b\"\nschedule = \"@daily\"\nplugin = \"config-test-noop\"\n", []string{`task "a:b" (task #1): name:`}},
		{"name leading dot", "[[task]]\nname = \".x\"\nschedule = \"@daily\"\nplugin = \"config-test-noop\"\n", []string{`task ".x" (task #1): name:`}},
		{"name too long", "[[task]]\nname = \"" + strings.Repeat("n", 129) + "\"\nschedule = \"@daily\"\nplugin = \"config-test-noop\"\n", []string{"(task #1): name:"}},
		{"name not a string", "[[task]]\nname = 5\nschedule = \"@daily\"\nplugin = \"config-test-noop\"\n", []string{"task #1: name: must be a string"}},
		{"name duplicate", minimal + minimal, []string{`task "report" (task #2): name: "report" is already used by task #1`}},

		{"schedule missing", "[[task]]\nname = \"report\"\nplugin = \"config-test-noop\"\n", []string{`task "report" (task #1): schedule: required`}},
		{"schedule invalid", "[[task]]\nname = \"report\"\nschedule = \"every hour\"\nplugin = \"config-test-noop\"\n", []string{`task "report" (task #1): schedule: "every hour"`}},
		{"schedule never fires", "[[task]]\nname = \"report\"\nschedule = \"0 0 30 2 *\"\nplugin = \"config-test-noop\"\n", []string{`task "report" (task #1): schedule:`, "never fires"}},
		{"schedule TZ prefix", "[[task]]\nname = \"report\"\nschedule = \"CRON_TZ=Europe/Paris 0 * * * *\"\nplugin = \"config-test-noop\"\n", []string{`task "report" (task #1): schedule:`, "timezone key"}},
		{"schedule every fraction", "[[task]]\nname = \"report\"\nschedule = \"@every 2.5s\"\nplugin = \"config-test-noop\"\n", []string{`task "report" (task #1): schedule:`, "whole number of seconds"}},
		{"timezone unknown", task("timezone = \"Europe/Atlantis\"\n"), []string{`task "report" (task #1): timezone: unknown time zone "Europe/Atlantis"`}},
		{"timezone Local", task("timezone = \"Local\"\n"), []string{`task "report" (task #1): timezone:`, "each host"}},
		{"timezone not a string", task("timezone = 1\n"), []string{`task "report" (task #1): timezone: must be a string`}},

		{"plugin missing", "[[task]]\nname = \"report\"\nschedule = \"@daily\"\n", []string{`task "report" (task #1): plugin: required`, noopPlugin}},
		{"plugin unknown", "[[task]]\nname = \"report\"\nschedule = \"@daily\"\nplugin = \"shell\"\n", []string{`task "report" (task #1): plugin: unknown plugin "shell"`, noopPlugin, strictPlugin}},
		{"params rejected", "[[task]]\nname = \"report\"\nschedule = \"@daily\"\nplugin = \"config-test-strict\"\n[task.params]\nfail = true\n",
			[]string{`task "report" (task #1): params: parameter "fail" is not allowed`, `task "report" (task #1): params: and a second problem`}},
		{"params not a table", task("params = \"x\"\n"), []string{`task "report" (task #1): params: must be a table`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse([]byte(tc.src), "test.toml", nil, testPlugins)
			if err == nil {
				t.Fatalf("no error; config %+v", cfg)
			}
			if cfg != nil {
				t.Error("a config came back with the error")
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

func TestParseConfigDoesNotQuoteRedisPassword(t *testing.T) {
	_, err := Parse([]byte("[redis]\nurl = \"redis://:s3cret@host:notaport/0\"\n"+minimal), "x", nil, testPlugins)
	if err == nil || !strings.Contains(err.Error(), "redis.url") || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("err = %v; want a redis.url error without the password", err)
	}
}

// One pass reports every problem, task by task.
func TestParseConfigReportsAllErrors(t *testing.T) {
	_, err := Parse([]byte(`
[daemon]
shutdown_grace = "soon"
[log]
level = "loud"
[defaults]
lease = "5x"

[[task]]
name = "a"
schedule = "bad spec"
plugin = "nope"
retries = 2

[[task]]
name = "b"
schedule = "@daily"
plugin = "config-test-noop"
timezone = "Nowhere"
max_attempts = 0
`), "multi.toml", nil, testPlugins)
	if err == nil {
		t.Fatal("no error")
	}
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) {
		t.Fatalf("%T is not a joined error", err)
	}
	want := []string{
		"daemon.shutdown_grace", "log.level", "defaults.lease",
		`task "a" (task #1): unknown key "task.retries"`, `task "a" (task #1): schedule:`, `task "a" (task #1): plugin:`,
		`task "b" (task #2): timezone:`, `task "b" (task #2): max_attempts:`,
	}
	if got := len(joined.Unwrap()); got != len(want) {
		t.Errorf("%d errors, want %d:\n%v", got, len(want), err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error does not contain %q:\n%v", w, err)
		}
	}
}

func TestParseScheduleErrorIsWrapped(t *testing.T) {
	_, err := Parse([]byte("[[task]]\nname = \"x\"\nschedule = \"@every 1ms\"\nplugin = \"config-test-noop\"\n"), "x", nil, testPlugins)
	_, direct := schedule.Parse("@every 1ms", "")
	if err == nil || direct == nil || !strings.Contains(err.Error(), direct.Error()) {
		t.Fatalf("config error %v does not carry the schedule error %v", err, direct)
	}
}

func TestEmptyConfigIsValid(t *testing.T) {
	var buf bytes.Buffer
	cfg, err := Parse(nil, "empty.toml", slog.New(slog.NewTextHandler(&buf, nil)), testPlugins)
	if err != nil || len(cfg.Tasks) != 0 {
		t.Fatalf("cfg, err = %+v, %v", cfg, err)
	}
	if !strings.Contains(buf.String(), "nothing will run") {
		t.Errorf("no warning logged: %q", buf.String())
	}
}

func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "slotd.toml")
	if err := os.WriteFile(path, []byte(minimal), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(path, nil, testPlugins)
	if err != nil || cfg.Source != path || len(cfg.Tasks) != 1 {
		t.Fatalf("Load = %+v, %v", cfg, err)
	}

	bad := filepath.Join(dir, "bad.toml")
	if err := os.WriteFile(bad, []byte("[log]\nlevel = \"loud\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(bad, nil, testPlugins); err == nil || !strings.HasPrefix(err.Error(), bad+": log.level") {
		t.Errorf("err = %v, want it prefixed with %s", err, bad)
	}

	missing := filepath.Join(dir, "missing.toml")
	if _, err := Load(missing, nil, testPlugins); !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Errorf("err = %v, want a not-exist error naming the path", err)
	}
}

func FuzzParseConfig(f *testing.F) {
	for _, seed := range []string{
		minimal,
		"",
		"[daemon]\nreplica = \"a\"\nshutdown_grace = \"1s\"\n[redis]\nurl = \"redis://localhost:6379\"\n",
		"[defaults]\nlease = \"5s\"\ndone_ttl = \"1h\"\nmax_attempts = 2\ncatchup = \"none\"\ndeadline = \"1m\"\n" + minimal,
		"[[task]]\nname = \"x\"\nschedule = \"@every 90s\"\ntimezone = \"Europe/London\"\nplugin = \"config-test-strict\"\n[task.params]\nfail = 1\n",
		"[[task]]\nname = \"a b\"\nschedule = \"0 0 30 2 *\"\nplugin = \"config-test-unknown\"\nlease = 3\n",
		"task = [{name = \"i\", schedule = \"@daily\", plugin = \"config-test-noop\", params = 7}]\n",
		"[task]\n[http]\nlisten = \"off\"\n[log]\nlevel = \"warn\"\nformat = \"text\"\n",
		"a.b.c = 1\n[[task]]\n[[task]]\nname = \"\"\n",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, src string) {
		cfg, err := Parse([]byte(src), "fuzz.toml", nil, testPlugins)
		if (cfg == nil) == (err == nil) {
			t.Fatalf("cfg %v, err %v: exactly one must be set", cfg, err)
		}
		if err != nil {
			return
		}
		for _, task := range cfg.Tasks {
			if task.Schedule == nil || task.Plugin == "" || task.Params == nil || task.Lease < time.Second ||
				task.MaxAttempts < 1 || task.MaxAttempts > 999 || task.DoneTTL < window(task) || task.Timeout <= 0 {
				t.Fatalf("invalid task accepted: %+v", task)
			}
		}
	})
}

// window is a valid task's slot window (as scheduler.Task.Window): the
// deadline, or the schedule's longest gap.
func window(t Task) time.Duration {
	if t.Deadline > 0 || t.Schedule == nil {
		return t.Deadline
	}
	return t.Schedule.MaxGap()
}

// policyOf reads back a task's merged policy keys.
func policyOf(t Task) taskPolicy {
	return taskPolicy{Lease: t.Lease, DoneTTL: t.DoneTTL, MaxAttempts: t.MaxAttempts, Timeout: t.Timeout, Catchup: t.Catchup, Deadline: t.Deadline}
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t.UTC()
}
