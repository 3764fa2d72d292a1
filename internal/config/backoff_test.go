package config

import (
	"strings"
	"testing"
	"time"
)

// retry_backoff loads as written, inherits from [defaults], defaults its
// multiplier and max, and is absent unless set.
func TestRetryBackoff(t *testing.T) {
	cfg := parse(t, `[defaults]
retry_backoff = { initial = "10s", multiplier = 3, max = "5m", jitter = 0.2 }

[[task]]
name = "inherits"
schedule = "@hourly"
plugin = "config-test-noop"

[[task]]
name = "own"
schedule = "@hourly"
plugin = "config-test-noop"
retry_backoff = { initial = "1s" }

[[task]]
name = "table"
schedule = "@hourly"
plugin = "config-test-noop"
  [task.retry_backoff]
  initial = "2s"
  multiplier = 1.5
`)
	want := map[string]RetryBackoff{
		"inherits": {Initial: 10 * time.Second, Multiplier: 3, Max: 5 * time.Minute, Jitter: 0.2},
		"own":      {Initial: time.Second, Multiplier: 2, Max: time.Hour}, // max: the slot window
		"table":    {Initial: 2 * time.Second, Multiplier: 1.5, Max: time.Hour},
	}
	for _, task := range cfg.Tasks {
		if task.RetryBackoff != want[task.Name] {
			t.Errorf("%s: %+v, want %+v", task.Name, task.RetryBackoff, want[task.Name])
		}
	}
	if b := parse(t, minimal).Tasks[0].RetryBackoff; b != (RetryBackoff{}) {
		t.Errorf("no retry_backoff: %+v, want none", b)
	}
}

func TestRetryBackoffErrors(t *testing.T) {
	task := func(rb string) string {
		return "[[task]]\nname = \"report\"\nplugin = \"config-test-noop\"\nschedule = \"@hourly\"\nretry_backoff = " + rb + "\n"
	}
	for _, tc := range []struct {
		name string
		src  string
		want []string
	}{
		{"not a table", task(`"10s"`), []string{`task "report" (task #1): retry_backoff: must be a table`, `the string "10s"`}},
		{"no initial", task(`{ max = "1m" }`), []string{`task "report" (task #1): retry_backoff: initial: required`}},
		{"bad initial", task(`{ initial = "soon" }`), []string{`retry_backoff: initial: "soon": invalid duration`}},
		{"zero initial", task(`{ initial = "0s" }`), []string{"retry_backoff: initial: 0s: must be positive"}},
		{"initial a number", task(`{ initial = 10 }`), []string{"retry_backoff: initial: must be a duration string", "the integer 10"}},
		{"max below initial", task(`{ initial = "1m", max = "10s" }`), []string{"retry_backoff: max: 10s is shorter than initial 1m0s"}},
		{"multiplier low", task(`{ initial = "1s", multiplier = 0.5 }`), []string{"retry_backoff: multiplier: 0.5 is out of range: want 1 to 100"}},
		{"multiplier string", task(`{ initial = "1s", multiplier = "2" }`), []string{"retry_backoff: multiplier: must be a number", `the string "2"`}},
		{"jitter high", task(`{ initial = "1s", jitter = 1.5 }`), []string{"retry_backoff: jitter: 1.5 is out of range: want 0 to 1"}},
		{"jitter negative", task(`{ initial = "1s", jitter = -0.1 }`), []string{"retry_backoff: jitter: -0.1 is out of range"}},
		{"unknown key", task(`{ initial = "1s", factor = 2 }`), []string{`unknown key "task.retry_backoff.factor"`, "initial, multiplier, max, jitter"}},
		{"initial past window", task(`{ initial = "1h" }`), []string{`task "report" (task #1): retry_backoff: initial 1h0m0s is not shorter than the slot window 1h0m0s`}},
		{"initial past deadline", "[[task]]\nname = \"report\"\nplugin = \"config-test-noop\"\nschedule = \"@hourly\"\ndeadline = \"30s\"\nretry_backoff = { initial = \"30s\" }\n",
			[]string{"retry_backoff: initial 30s is not shorter than the slot window 30s"}},
		{"from defaults", "[defaults]\nretry_backoff = { initial = \"2h\" }\n" + minimal,
			[]string{"retry_backoff: initial 2h0m0s (from [defaults]) is not shorter than the slot window"}},
		{"defaults bad", "[defaults]\nretry_backoff = { initial = \"x\" }\n" + minimal, []string{`defaults.retry_backoff: initial: "x": invalid duration`}},
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
