//go:build unix

package cli

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slotd/slotd/internal/assemble"
	"github.com/slotd/slotd/internal/observe"
	"github.com/slotd/slotd/lock/memlock"
	"github.com/slotd/slotd/scheduler"
)

// Issue 26 items 3 and 4: a reload of an empty file (a 0-byte or
// truncated config on SIGHUP) removed every task and counted as a
// success; tls_ca_file = "/dev/zero" killed the daemon; a FIFO as the
// file or as token_file blocked the reload, and every later one, for
// ever. Each is now a failed reload, at once, counted, the tasks kept;
// a valid reload that removes a task logs it by name.
func TestReloadRefusesEmptyUnboundedAndBlockingFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "slotd.toml")
	write := func(src string) {
		t.Helper()
		os.Remove(path)
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	twoTasks := reloadBase + `
[[task]]
name = "b"
schedule = "@every 1h"
plugin = "cli-test-counted"
`
	write(twoTasks)
	var logs syncBuffer
	log := newLogger(&logs, slog.LevelInfo, "json")
	d, err := assemble.Load(path, log)
	if err != nil {
		t.Fatal(err)
	}
	sched := scheduler.New(d.Tasks, memlock.New(time.Now), scheduler.WithLogger(log))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sched.Run(ctx) }()
	defer func() { cancel(); <-done }()
	r := newReloader(d, sched, log, nil, prometheus.NewRegistry())
	names := func() string {
		var ns []string
		for _, task := range sched.Tasks() {
			ns = append(ns, task.Name)
		}
		return strings.Join(ns, ",")
	}
	fifo := filepath.Join(dir, "token.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}

	failures := 0.0
	for _, tc := range []struct {
		name  string
		setup func()
		want  string
	}{
		{"an empty file", func() { write("") }, "no [[task]]"},
		{"comments only", func() { write("# being rewritten\n") }, "no [[task]]"},
		{"the file a FIFO", func() { os.Remove(path); syscall.Mkfifo(path, 0o644) }, "not a regular file"},
		{"the FIFO again, not queued behind the first", func() {}, "not a regular file"},
		{"tls_ca_file /dev/zero", func() {
			write("[redis]\nurl = \"rediss://127.0.0.1:1\"\ntls_ca_file = \"/dev/zero\"\n" + twoTasks)
		}, "redis.tls_ca_file: read /dev/zero: not a regular file"},
		{"token_file a FIFO", func() { write(strings.Replace(twoTasks, "[http]\n", "[http]\ntoken_file = \""+fifo+"\"\n", 1)) }, "http.token_file"},
	} {
		tc.setup()
		start := time.Now()
		err := r.Reload(ctx)
		if d := time.Since(start); d > 4*time.Second {
			t.Errorf("%s: the reload took %v", tc.name, d)
		}
		failures++
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, observe.ErrInvalidConfig) {
			t.Errorf("%s: reload = %v; want an invalid-config error containing %q", tc.name, err, tc.want)
		}
		if names() != "a,b" || metricValue(t, r.failures) != failures || metricValue(t, r.successes) != 0 {
			t.Errorf("%s: tasks %s, failures %v, successes %v; want a,b kept and the failure counted", tc.name, names(),
				metricValue(t, r.failures), metricValue(t, r.successes))
		}
	}

	write(reloadBase)
	if err := r.Reload(ctx); err != nil {
		t.Fatalf("a valid reload removing b: %v", err)
	}
	if names() != "a" || !hasLog(t, &logs, "tasks removed by the reload: this replica claims none of their slots from now on", func(m map[string]any) bool {
		removed, _ := json.Marshal(m["removed"])
		return m["level"] == "WARN" && string(removed) == `["b"]`
	}) {
		t.Errorf("tasks %s; want a, and b's removal logged by name:\n%s", names(), logs.String())
	}
}
