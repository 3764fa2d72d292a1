package config

import (
	"strings"
	"testing"
	"time"
)

// schedules, active bounds, H and jitter load into the task.
func TestScheduleKeys(t *testing.T) {
	cfg := parse(t, `
[[task]]
name = "month-end"
schedules = ["0 18 LW * *", "0 9 * * 1#1"]
active_from = "2026-01-01T00:00:00Z"
active_until = 2027-06-30T00:00:00+02:00
timezone = "Europe/Berlin"
jitter = "45s"
plugin = "config-test-noop"

[[task]]
name = "spread"
schedule = "H H(0-5) * * *"
plugin = "config-test-noop"
`)
	me, sp := cfg.Tasks[0], cfg.Tasks[1]
	if me.Spec != "0 18 LW * *; 0 9 * * 1#1" || me.Jitter != 45*time.Second {
		t.Errorf("month-end: Spec %q, Jitter %v", me.Spec, me.Jitter)
	}
	b := me.Schedule.Bounds()
	if !b.From.Equal(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)) || !b.Until.Equal(time.Date(2027, 6, 29, 22, 0, 0, 0, time.UTC)) {
		t.Errorf("bounds %v", b)
	}
	if got := me.Schedule.Next(time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)); !got.Equal(time.Date(2026, 1, 5, 8, 0, 0, 0, time.UTC)) {
		t.Errorf("first fire %v, want the first Monday of 2026 at 09:00 CET", got)
	}
	if got := me.Schedule.Next(b.Until); !got.IsZero() {
		t.Errorf("a fire after active_until: %v", got)
	}
	if len(sp.Schedule.Parts()) != 1 || strings.Contains(sp.Schedule.Spec(), "H") || sp.Spec != "H H(0-5) * * *" {
		t.Errorf("spread: resolved %q, written %q", sp.Schedule.Spec(), sp.Spec)
	}
	again := parse(t, "[[task]]\nname = \"spread\"\nschedule = \"H H(0-5) * * *\"\nplugin = \"config-test-noop\"\n")
	if again.Tasks[0].Schedule.Spec() != sp.Schedule.Spec() {
		t.Error("H resolves differently on a second load")
	}
}

func TestScheduleKeyErrors(t *testing.T) {
	task := func(body string) string {
		return "[[task]]\nname = \"report\"\nplugin = \"config-test-noop\"\n" + body
	}
	for _, tc := range []struct {
		name string
		src  string
		want []string
	}{
		{"both", task("schedule = \"@hourly\"\nschedules = [\"@daily\"]\n"), []string{`task "report"`, "schedules: set either schedule or schedules"}},
		{"neither", task(""), []string{`task "report"`, "schedule: required"}},
		{"schedules empty", task("schedules = []\n"), []string{"schedules: empty"}},
		{"schedules not a list", task("schedules = \"@daily\"\n"), []string{"schedules: must be an array", "the string"}},
		{"schedules element", task("schedules = [\"@daily\", 5]\n"), []string{"schedules: element 1 must be a string"}},
		{"schedules bad spec", task("schedules = [\"@daily\", \"0 0 L-40 * *\"]\n"), []string{`task "report" (task #1): schedules[1]`, "L-n"}},
		{"schedules duplicate", task("schedules = [\"0 0 * * *\", \"0 0 * * *\"]\n"), []string{"schedules[0] and schedules[1] are the same"}},
		{"bad W", task("schedule = \"0 0 40W * *\"\n"), []string{`task "report" (task #1): schedule:`, "nW"}},
		{"bad H", task("schedule = \"H(50-70) * * * *\"\n"), []string{"schedule:", "H(a-b)"}},
		{"from after until", task("schedule = \"@daily\"\nactive_from = \"2027-01-01T00:00:00Z\"\nactive_until = \"2026-01-01T00:00:00Z\"\n"),
			[]string{`task "report"`, "active_until", "is not before"}},
		{"from bad", task("schedule = \"@daily\"\nactive_from = \"2027-01-01\"\n"), []string{"active_from", "RFC 3339"}},
		{"from local", task("schedule = \"@daily\"\nactive_from = 2027-01-01T00:00:00\n"), []string{"active_from", "local date-time"}},
		{"until integer", task("schedule = \"@daily\"\nactive_until = 5\n"), []string{"active_until", "the integer 5"}},
		{"no fire in bounds", task("schedule = \"0 0 1 1 *\"\nactive_from = \"2027-02-01T00:00:00Z\"\nactive_until = \"2027-03-01T00:00:00Z\"\n"),
			[]string{"active_until", "no fire time"}},
		{"jitter bad", task("schedule = \"@hourly\"\njitter = \"soon\"\n"), []string{`task "report"`, "jitter", "invalid duration"}},
		{"jitter zero", task("schedule = \"@hourly\"\njitter = \"0s\"\n"), []string{"jitter", "must be positive"}},
		{"jitter window", task("schedule = \"@hourly\"\njitter = \"1h\"\n"), []string{`task "report"`, "jitter", "not shorter than the slot window 1h0m0s"}},
		{"jitter deadline", task("schedule = \"@hourly\"\ndeadline = \"5m\"\njitter = \"5m\"\n"), []string{"jitter", "window 5m0s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.src), "test.toml", nil, testPlugins)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestMaxRunning(t *testing.T) {
	if cfg := parse(t, "[daemon]\nmax_running = 50\n"+minimal); cfg.MaxRunning != 50 {
		t.Errorf("MaxRunning = %d, want 50", cfg.MaxRunning)
	}
	if cfg := parse(t, minimal); cfg.MaxRunning != 0 {
		t.Errorf("MaxRunning = %d by default, want 0 (no cap)", cfg.MaxRunning)
	}
	for _, tc := range []struct{ src, want string }{
		{"[daemon]\nmax_running = -1\n", "daemon.max_running: -1 is out of range"},
		{"[daemon]\nmax_running = \"10\"\n", "daemon.max_running: must be an integer"},
		{"[daemon]\nmax_running = 2000000\n", "out of range: want 0 to 1000000"},
	} {
		_, err := Parse([]byte(tc.src+minimal), "test.toml", nil, testPlugins)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.src, err, tc.want)
		}
	}
}
