package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Issue 16 item 6, with the real binary: `run -config /dev/zero` returns
// at once with the size limit (it never returned), and the 40 KB
// file of 20,000 nested keys (24 s and 5 GB to reject) is refused in well
// under a second by both validate and run, exit 2, naming the limit.
func TestInputBoundsRefusedFast(t *testing.T) {
	t.Parallel()
	deep := filepath.Join(t.TempDir(), "deep.toml")
	if err := os.WriteFile(deep, []byte(strings.Repeat("a.", 20_000)+"a = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "-config", "/dev/zero"}, "not a regular file"},
		{[]string{"validate", "-config", "/dev/zero"}, "not a regular file"},
		{[]string{"validate", "-config", deep}, "nested deeper than 16 levels"},
		{[]string{"run", "-config", deep}, "nested deeper than 16 levels"},
	} {
		start := time.Now()
		r := slotd(t, tc.args...)
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("slotd %s took %v", strings.Join(tc.args, " "), d)
		}
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("slotd %s: exit %d, stderr %q; want exit 2 naming %q", strings.Join(tc.args, " "), r.code, r.stderr, tc.want)
		}
	}
}

// Issue 16 items 5(a) and 8 with the real binary: validate reports every
// error of a task, refuses a deadline under 1s, a missing exec dir and a
// timezone on @every, and never prints a piece of a Redis password.
func TestValidateInputHardening(t *testing.T) {
	t.Parallel()
	r := validate(t, vconfig("", "", `[[task]]
name = "report"
schedule = "@every 1.5s"
timezone = "Mars/Base"
plugin = "exec"
deadline = "500ms"
  [task.params]
  command = ["slotd-no-such-program"]
  comand = ["true"]
  dir = "/nonexistent/slotd-dir"
`, vtask("every", "@every 90s", `timezone = "Europe/Paris"`)))
	if r.code != 2 {
		t.Errorf("exit %d, want 2", r.code)
	}
	for _, want := range []string{`timezone: unknown time zone "Mars/Base"`, `schedule: "@every 1.5s"`, "deadline: 500ms is shorter than 1s",
		`unknown parameter "comand"`, `"slotd-no-such-program" not found`, `"/nonexistent/slotd-dir" does not exist`,
		`task "every" (task #2): timezone: "Europe/Paris" has no effect on "@every 90s"`} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr does not report %q:\n%s", want, r.stderr)
		}
	}

	r = validate(t, "[redis]\nurl = \"redis://slotd:Pw9X/k3Vj@db:6379/0\"\n"+vtask("report", "@hourly", ""))
	if r.code != 2 || !strings.Contains(r.stderr, "invalid Redis URL") || strings.Contains(r.stderr, "Pw9") || strings.Contains(r.stderr, "k3V") {
		t.Errorf("a URL with a / in its password: exit %d, stderr %q", r.code, r.stderr)
	}
}
