package config

import (
	"strings"
	"testing"
	"time"
)

// catchup_limit (issue 16 item 8): default 24h, set in [defaults] or per
// task, a positive duration.
func TestCatchupLimit(t *testing.T) {
	if got := parse(t, minimal).Tasks[0].CatchupLimit; got != 24*time.Hour {
		t.Errorf("default catchup_limit %v, want 24h", got)
	}
	cfg := parse(t, "[defaults]\ncatchup_limit = \"2h\"\n"+minimal+`
[[task]]
name = "leap"
schedule = "0 0 29 2 *"
plugin = "config-test-noop"
catchup_limit = "10m"
`)
	if got := cfg.Tasks[0].CatchupLimit; got != 2*time.Hour {
		t.Errorf("catchup_limit from [defaults] %v, want 2h", got)
	}
	if got := cfg.Tasks[1].CatchupLimit; got != 10*time.Minute {
		t.Errorf("task catchup_limit %v, want 10m", got)
	}
	_, err := Parse([]byte(minimal+"catchup_limit = \"-1s\"\n"), "test.toml", nil, testPlugins)
	if err == nil || !strings.Contains(err.Error(), "catchup_limit") || !strings.Contains(err.Error(), "report") {
		t.Errorf("negative catchup_limit: %v, want an error naming the key and the task", err)
	}
}
