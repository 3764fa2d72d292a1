package observe_test

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/observe"
	"github.com/slotd/slotd/lock/memlock"
	"github.com/slotd/slotd/scheduler"
)

// The status API and the metrics follow a reload: a task it adds is
// listed and exported, one it removes is not (before the scheduler runs,
// as when SIGHUP comes while the daemon starts).
func TestStatusFollowsReload(t *testing.T) {
	store := memlock.New(time.Now)
	sched := scheduler.New([]scheduler.Task{statusTask(t, "old", "@every 24h", 3, 48*time.Hour)}, store,
		scheduler.WithLogger(slog.New(slog.DiscardHandler)))
	h := observe.Handler(observe.Daemon{Scheduler: sched, Store: store, Replica: "r1"})
	if _, err := sched.Reload(context.Background(), []scheduler.Task{statusTask(t, "new", "@every 24h", 3, 48*time.Hour)}); err != nil {
		t.Fatal(err)
	}
	get := func(path string) string {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		b, _ := io.ReadAll(rec.Body)
		return string(b)
	}
	api, metrics := get("/api/v1/tasks"), get("/metrics")
	for what, body := range map[string]string{"/api/v1/tasks": api, "/metrics": metrics} {
		if !strings.Contains(body, `"new"`) || strings.Contains(body, `"old"`) {
			t.Errorf("%s after the reload: want task new and not old:\n%.2000s", what, body)
		}
	}
}
