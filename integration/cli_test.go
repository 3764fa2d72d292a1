package integration

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// result is one finished slotd command.
type result struct {
	code           int
	stdout, stderr string
}

// slotd runs the binary with args and waits for it (no Redis is needed by
// anything run here).
func slotd(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, slotdBin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("slotd %s: still running after 30s", strings.Join(args, " "))
	}
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatalf("slotd %s: %v", strings.Join(args, " "), err)
	}
	r := result{code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String()}
	// A Go panic also exits 2: make sure a 2 is slotd's own.
	if strings.Contains(r.stderr, "panic") || strings.Contains(r.stderr, "goroutine ") {
		t.Errorf("slotd %s panicked:\n%s", strings.Join(args, " "), r.stderr)
	}
	return r
}

// validate writes config to a file and runs `slotd validate` on it.
func validate(t *testing.T, config string) result {
	t.Helper()
	path := filepath.Join(t.TempDir(), "slotd.toml")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	r := slotd(t, "validate", "-config", path)
	// The path holds the test's name, which holds the very key names the
	// tests look for in the message.
	r.stderr = strings.ReplaceAll(r.stderr, path, "CONFIG")
	return r
}

// vconfig is a configuration for validate: top-level lines, [defaults]
// lines and [[task]] blocks around a fixed, valid daemon section. The
// Redis URL is never dialled by validate.
func vconfig(top, defaults string, tasks ...string) string {
	return fmt.Sprintf(`%s
[daemon]
replica = "v1"
shutdown_grace = "1s"

[redis]
url = "redis://127.0.0.1:1/0"

[http]
listen = "off"

[defaults]
lease = "2s"
%s

%s`, top, defaults, strings.Join(tasks, "\n"))
}

// vtask is an exec [[task]] block; extra holds task keys.
func vtask(name, schedule, extra string) string {
	return fmt.Sprintf(`[[task]]
name = %s
schedule = %s
plugin = "exec"
%s
  [task.params]
  command = ["/bin/true"]
`, q(name), q(schedule), extra)
}

// Each bad configuration is refused by validate with exit status 2 and a
// message naming the offending key and, where there is one, the task —
// never with a panic.
func TestValidateBadConfigs(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		config string
		want   []string // each must appear in stderr; "a|b": either
	}{
		{"unknown top-level key", vconfig(`colour = "red"`, "", vtask("report", "@hourly", "")),
			[]string{"colour"}},
		{"unknown key in defaults", vconfig("", `leese = "3s"`, vtask("report", "@hourly", "")),
			[]string{"leese"}},
		{"unknown key in task", vconfig("", "", vtask("report", "@hourly", `colour = "red"`)),
			[]string{"colour", "report"}},
		{"bad duration", vconfig("", "", vtask("report", "@hourly", `lease = "5x"`)),
			[]string{"lease", "report"}},
		{"bad duration in defaults", vconfig("", `timeout = "5x"`, vtask("report", "@hourly", "")),
			[]string{"timeout"}},
		{"lease too short", vconfig("", "", vtask("report", "@hourly", `lease = "100ms"`)),
			[]string{"lease", "report"}},
		{"max_attempts 0", vconfig("", "", vtask("report", "@hourly", `max_attempts = 0`)),
			[]string{"max_attempts", "report"}},
		{"max_attempts 1000", vconfig("", `max_attempts = 1000`, vtask("report", "@hourly", "")),
			[]string{"max_attempts"}},
		{"bad cron spec", vconfig("", "", vtask("report", "61 * * * *", "")),
			[]string{"schedule", "report"}},
		{"bad descriptor", vconfig("", "", vtask("report", "@fortnightly", "")),
			[]string{"schedule", "report"}},
		{"missing schedule", vconfig("", "", `[[task]]
name = "report"
plugin = "exec"
  [task.params]
  command = ["/bin/true"]
`), []string{"schedule", "report"}},
		{"unknown timezone", vconfig("", "", vtask("report", "@hourly", `timezone = "Mars/Base"`)),
			[]string{"timezone", "report"}},
		{"bad catchup", vconfig("", "", vtask("report", "@hourly", `catchup = "sometimes"`)),
			[]string{"catchup", "report"}},
		{"unknown plugin", vconfig("", "", `[[task]]
name = "report"
schedule = "@hourly"
plugin = "nope"
`), []string{"plugin|nope", "report"}},
		{"duplicate task name", vconfig("", "", vtask("report", "@hourly", ""), vtask("report", "@daily", "")),
			[]string{"report", "name|duplicate"}},
		{"task name with a brace", vconfig("", "", vtask("re{port", "@hourly", "")),
			[]string{"name", "re{port"}},
		{"task name with a space", vconfig("", "", vtask("re port", "@hourly", "")),
			[]string{"name", "re port"}},
		{"done_ttl shorter than the window", vconfig("", "", vtask("daily", "@daily", `done_ttl = "1h"`)),
			[]string{"done_ttl", "daily"}},
		{"deadline beyond done_ttl", vconfig("", "", vtask("report", "@daily", "deadline = \"3h\"\ndone_ttl = \"2h\"")),
			[]string{"deadline|done_ttl", "report"}},
		{"exec without command", vconfig("", "", `[[task]]
name = "report"
schedule = "@hourly"
plugin = "exec"
  [task.params]
  grace = "1s"
`), []string{"command", "report"}},
		{"TOML syntax error", "[daemon]\nreplica = \n", []string{"line 2"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := validate(t, tc.config)
			if r.code != 2 {
				t.Errorf("exit status %d, want 2; stderr:\n%s", r.code, r.stderr)
			}
			for _, w := range tc.want {
				if !containsAny(r.stderr, strings.Split(w, "|")) {
					t.Errorf("stderr does not name %q:\n%s", w, r.stderr)
				}
			}
			if t.Failed() {
				t.Logf("config:\n%s", tc.config)
			}
		})
	}
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// A good configuration validates, and validate prints each task's next
// slot ids.
func TestValidateGoodConfig(t *testing.T) {
	t.Parallel()
	before := time.Now().UTC()
	r := validate(t, vconfig("", "", vtask("report", "0 * * * *", ""), vtask("tick", "*/2 * * * * *", "")))
	after := time.Now().UTC()
	if r.code != 0 {
		t.Fatalf("exit status %d, want 0; stderr:\n%s", r.code, r.stderr)
	}
	// The next hourly slot, at hour resolution; the hour may turn during
	// the run.
	hourly := []string{
		before.Truncate(time.Hour).Add(time.Hour).Format("2006010215"),
		after.Truncate(time.Hour).Add(time.Hour).Format("2006010215"),
	}
	// The next even second, at second resolution.
	var tick []string
	for at := before.Truncate(time.Second); !at.After(after.Add(2 * time.Second)); at = at.Add(time.Second) {
		if at.Second()%2 == 0 {
			tick = append(tick, at.Format("20060102150405"))
		}
	}
	for _, want := range []struct {
		what string
		any  []string
	}{
		{"task report", []string{"report"}},
		{"task tick", []string{"tick"}},
		{"report's next slot id", hourly},
		{"tick's next slot id", tick},
	} {
		if !containsAny(r.stdout, want.any) {
			t.Errorf("stdout lacks %s (one of %q):\n%s", want.what, want.any, r.stdout)
		}
	}
}

// Usage errors exit 2, version exits 0, a missing or bad config exits 2
// for run as for validate.
func TestCommandLine(t *testing.T) {
	t.Parallel()
	bad := filepath.Join(t.TempDir(), "bad.toml")
	if err := os.WriteFile(bad, []byte(vconfig(`colour = "red"`, "", vtask("report", "@hourly", ""))), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "missing.toml")
	for _, tc := range []struct {
		args   []string
		code   int
		stdout string // must appear in stdout
		stderr string // must appear in stderr
	}{
		{args: nil, code: 2, stderr: "usage"},
		{args: []string{"frobnicate"}, code: 2, stderr: "frobnicate"},
		{args: []string{"version"}, code: 0, stdout: "slotd "},
		{args: []string{"validate", "-bogus"}, code: 2, stderr: "bogus"},
		{args: []string{"validate", "-config", missing}, code: 2, stderr: "missing.toml"},
		{args: []string{"run", "-config", missing}, code: 2, stderr: "missing.toml"},
		{args: []string{"run", "-config", bad}, code: 2, stderr: "colour"},
	} {
		r := slotd(t, tc.args...)
		if r.code != tc.code || !strings.Contains(r.stdout, tc.stdout) || !strings.Contains(r.stderr, tc.stderr) {
			t.Errorf("slotd %q: exit %d, want %d; stdout want %q:\n%s\nstderr want %q:\n%s",
				tc.args, r.code, tc.code, tc.stdout, r.stdout, tc.stderr, r.stderr)
		}
	}
}
