package cli

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/slotd/slotd/internal/assemble"
	"github.com/slotd/slotd/internal/observe"
	"github.com/slotd/slotd/lock/memlock"
	"github.com/slotd/slotd/scheduler"
)

const reloadBase = `[daemon]
replica = "r-reload"

[http]
listen = "off"

[[task]]
name = "a"
schedule = "@every 1h"
plugin = "cli-test-counted"
catchup = "none"
`

// A reload of an invalid file changes nothing and says why, naming the
// task and key; a valid one replaces the tasks, sets the log level, and
// names the settings that apply only at a restart, which keep their
// running values.
func TestReloadValidInvalidRestartNeeded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "slotd.toml")
	write := func(src string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(reloadBase)
	var logs syncBuffer
	level := new(slog.LevelVar)
	log := newLogger(&logs, level, "json")
	d, err := assemble.Load(path, log)
	if err != nil {
		t.Fatal(err)
	}
	sched := scheduler.New(d.Tasks, memlock.New(time.Now), scheduler.WithLogger(log))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sched.Run(ctx) }()
	defer func() { cancel(); <-done }()
	reg := prometheus.NewRegistry()
	r := newReloader(d, sched, log, level, reg)
	names := func() string {
		var ns []string
		for _, task := range sched.Tasks() {
			ns = append(ns, task.Name)
		}
		return strings.Join(ns, ",")
	}

	write(reloadBase + `
[[task]]
name = "b"
schedule = "every hour"
plugin = "cli-test-counted"
`)
	err = r.Reload(ctx)
	if err == nil || !strings.Contains(err.Error(), `task "b"`) || !strings.Contains(err.Error(), "schedule") || !errors.Is(err, observe.ErrInvalidConfig) {
		t.Errorf("reload of a bad schedule: %v, want an error naming task \"b\" and its schedule, wrapping observe.ErrInvalidConfig (the API's 422)", err)
	}
	if names() != "a" || metricValue(t, r.failures) != 1 || metricValue(t, r.successes) != 0 {
		t.Errorf("after the invalid reload: tasks %s, failures %v, successes %v", names(),
			metricValue(t, r.failures), metricValue(t, r.successes))
	}
	if !hasLog(t, &logs, "configuration reload failed: the running configuration stays", func(m map[string]any) bool {
		return m["level"] == "ERROR" && strings.Contains(m["err"].(string), `task "b"`)
	}) {
		t.Errorf("no error logged naming the task:\n%s", logs.String())
	}

	write(strings.Replace(reloadBase, `listen = "off"`, `listen = "127.0.0.1:0"`, 1) + `
[log]
level = "debug"

[plugins.http]
max_idle_per_host = 7

[redis]
url = "redis://:secret@127.0.0.1:1/0"

[[task]]
name = "b"
schedule = "@every 1h"
plugin = "cli-test-counted"
`)
	if err := r.Reload(ctx); err != nil {
		t.Fatalf("valid reload: %v", err)
	}
	if names() != "a,b" || metricValue(t, r.successes) != 1 || metricValue(t, r.restartNeeded) != 1 {
		t.Errorf("after the valid reload: tasks %s, successes %v, restart needed %v", names(),
			metricValue(t, r.successes), metricValue(t, r.restartNeeded))
	}
	if !hasLog(t, &logs, "configuration reloaded, but these settings apply only at a restart: they keep their running values until then",
		func(m map[string]any) bool {
			keys, _ := json.Marshal(m["restart_needed"])
			return m["level"] == "WARN" && string(keys) == `["redis.url","http.listen"]`
		}) {
		t.Errorf("no warning naming redis.url and http.listen (and only them: the log level and the http pool apply):\n%s", logs.String())
	}
	if level.Level() != slog.LevelDebug || r.pool.MaxIdlePerHost != 7 {
		t.Errorf("after the reload: log level %v, want debug; http pool %+v, want 7 idle per host", level.Level(), r.pool)
	}
	if strings.Contains(logs.String(), "secret") {
		t.Errorf("the log quotes the Redis password:\n%s", logs.String())
	}
	if !hasLog(t, &logs, "tasks reloaded", func(m map[string]any) bool {
		added, _ := json.Marshal(m["added"])
		return string(added) == `["b"]`
	}) {
		t.Errorf("the engine did not log b as added:\n%s", logs.String())
	}

	write(reloadBase + `
[[task]]
name = "b"
schedule = "@every 1h"
plugin = "cli-test-counted"
`)
	if err := r.Reload(ctx); err != nil || metricValue(t, r.restartNeeded) != 0 {
		t.Errorf("reload back to the running settings: %v, restart needed %v", err, metricValue(t, r.restartNeeded))
	}
}

// hasLog reports whether logs holds a JSON line with message msg for
// which match holds.
func hasLog(t *testing.T, logs *syncBuffer, msg string, match func(map[string]any) bool) bool {
	t.Helper()
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q is not JSON: %v", line, err)
		}
		if m["msg"] == msg && match(m) {
			return true
		}
	}
	return false
}

// metricValue reads a counter's or gauge's value.
func metricValue(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		t.Fatal(err)
	}
	if d.Counter != nil {
		return d.Counter.GetValue()
	}
	return d.Gauge.GetValue()
}
