package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slotd/slotd/tasks"
)

// countedBuilds counts the builds of the cli-test-counted plugin, whose
// factory logs one line.
var countedBuilds atomic.Int32

func init() {
	tasks.Register("cli-test-counted", func(_ map[string]any, log *slog.Logger) (tasks.Task, error) {
		countedBuilds.Add(1)
		log.Info("plugin built")
		return tasks.TaskFunc(func(context.Context) error { return nil }), nil
	})
}

// syncBuffer is a bytes.Buffer that the daemon writes and the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// `slotd run` reads its file once: each plugin is built once, and what a
// factory logs goes to the log the file's [log] settings describe, scoped
// to the replica and the task.
func TestRunBuildsPluginsOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "slotd.toml")
	src := `[daemon]
replica = "r-once"

[http]
listen = "off"

[log]
format = "json"

[[task]]
name = "counted"
schedule = "@every 1h"
plugin = "cli-test-counted"
catchup = "none"
`
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	countedBuilds.Store(0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() { done <- Main(ctx, []string{"run", "-config", path}, &stdout, &stderr) }()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(stderr.String(), "slotd starting") {
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("the daemon did not start:\n%s", stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if code := <-done; code != exitOK {
		t.Fatalf("run exited %d:\n%s", code, stderr.String())
	}
	if n := countedBuilds.Load(); n != 1 {
		t.Errorf("the plugin was built %d times, want once", n)
	}
	var built map[string]any
	for _, line := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q is not JSON: %v", line, err)
		}
		if m["msg"] == "plugin built" {
			built = m
		}
	}
	if built == nil || built["replica"] != "r-once" || built["task"] != "counted" {
		t.Errorf("the factory's log line = %v; want it in the JSON log with replica r-once and task counted\n%s", built, stderr.String())
	}
}
