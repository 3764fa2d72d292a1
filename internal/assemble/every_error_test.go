package assemble

import (
	"strings"
	"testing"
)

// Issue 16 item 8: a task's errors are all reported (one did hide
// another), a deadline under 1 s and a missing exec dir are load errors,
// and a timezone on an @every task, which it would ignore, is refused.
// Each error names the task, the key and the value.
func TestTaskErrorsAllReported(t *testing.T) {
	for _, tc := range []struct {
		name string
		task string
		want []string
	}{
		{"bad zone and bad @every", "schedule = \"@every 1.5s\"\ntimezone = \"Mars/Olympus\"\nplugin = \"assemble-test-noop\"\n", []string{
			`task "t" (task #1): timezone: unknown time zone "Mars/Olympus"`,
			`task "t" (task #1): schedule: "@every 1.5s": @every needs a whole number of seconds`,
		}},
		{"bad zone and bad cron", "schedule = \"0 25 * * *\"\ntimezone = \"Nowhere/Land\"\nplugin = \"assemble-test-noop\"\n", []string{
			`timezone: unknown time zone "Nowhere/Land"`, `schedule: "0 25 * * *"`,
		}},
		{"timezone on @every", "schedule = \"@every 90s\"\ntimezone = \"Europe/Paris\"\nplugin = \"assemble-test-noop\"\n", []string{
			`task "t" (task #1): timezone: "Europe/Paris" has no effect on "@every 90s"`, "remove timezone",
		}},
		{"unknown param and command not in PATH", "schedule = \"@hourly\"\nplugin = \"exec\"\n[task.params]\ncommand = [\"slotd-no-such-program\"]\ncomand = [\"true\"]\n", []string{
			`task "t" (task #1): params: tasks: exec: unknown parameter "comand"`,
			`task "t" (task #1): params: tasks: exec: parameter "command": "slotd-no-such-program" not found`,
		}},
		{"exec dir missing", "schedule = \"@hourly\"\nplugin = \"exec\"\n[task.params]\ncommand = [\"/bin/true\"]\ndir = \"/nonexistent/slotd-dir\"\n", []string{
			`task "t" (task #1): params: tasks: exec: parameter "dir": "/nonexistent/slotd-dir" does not exist`,
		}},
		{"deadline under 1s", "schedule = \"@hourly\"\nplugin = \"assemble-test-noop\"\ndeadline = \"500ms\"\n", []string{
			`task "t" (task #1): deadline: 500ms is shorter than 1s`,
		}},
		{"everything at once", "schedule = \"@every 1.5s\"\ntimezone = \"Mars/Olympus\"\nplugin = \"exec\"\ndeadline = \"999ms\"\n[task.params]\ncommand = [\"slotd-no-such-program\"]\ncomand = 1\ndir = \"/nonexistent/slotd-dir\"\n", []string{
			"timezone: unknown time zone", "schedule: \"@every 1.5s\"", "deadline: 999ms is shorter than 1s",
			`unknown parameter "comand"`, `"slotd-no-such-program" not found`, `parameter "dir": "/nonexistent/slotd-dir" does not exist`,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte("[[task]]\nname = \"t\"\n"+tc.task), "test.toml", nil)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not report %q:\n%v", w, err)
				}
			}
			for _, line := range strings.Split(err.Error(), "\n") {
				if !strings.HasPrefix(line, `test.toml: task "t" (task #1): `) {
					t.Errorf("line %q does not name the file and the task", line)
				}
			}
		})
	}
	// A deadline of 1s, timezone UTC on @every, and a dir that exists are fine.
	for _, ok := range []string{
		"schedule = \"@hourly\"\nplugin = \"assemble-test-noop\"\ndeadline = \"1s\"\n",
		"schedule = \"@every 90s\"\ntimezone = \"UTC\"\nplugin = \"assemble-test-noop\"\n",
		"schedule = \"@hourly\"\nplugin = \"exec\"\n[task.params]\ncommand = [\"/bin/true\"]\ndir = \"/\"\n",
	} {
		if _, err := Parse([]byte("[[task]]\nname = \"t\"\n"+ok), "test.toml", nil); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
}
