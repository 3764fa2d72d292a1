package observe_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/observe"
	"github.com/slotd/slotd/lock/memlock"
	"github.com/slotd/slotd/scheduler"
	"github.com/slotd/slotd/scheduler/history"
	"github.com/slotd/slotd/tasks"
)

// POST /api/v1/tasks/{name}/backfill needs the token; with it, the daemon
// runs the range's slots (the answer names them), the history and the
// task page say backfilled, and a bad request is refused with a status
// and an error naming the value.
func TestBackfillEndpoint(t *testing.T) {
	store := memlock.New(nil)
	var ran atomic.Int64
	task := statusTask(t, "report", "@every 1h", 3, 48*time.Hour)
	task.Job = tasks.TaskFunc(func(context.Context) error { ran.Add(1); return nil })
	hist := history.NewMemory(100)
	sched := scheduler.New([]scheduler.Task{task}, store, scheduler.WithReplica("r1"),
		scheduler.WithLogger(slog.New(slog.DiscardHandler)), scheduler.WithHistory(hist))
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { defer close(stopped); _ = sched.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-stopped })
	h := observe.Handler(observe.Daemon{Scheduler: sched, Store: store, History: hist, Replica: "r1", Token: testToken})

	to := time.Now().UTC().Truncate(time.Hour)
	from := to.Add(-3 * time.Hour)
	path := func(task string, from, to string) string {
		return "/api/v1/tasks/" + task + "/backfill?" + url.Values{"from": {from}, "to": {to}}.Encode()
	}
	good := path("report", from.Format(time.RFC3339), to.Format(time.RFC3339))
	for _, auth := range []string{"", "Bearer wrong-token-0123456789"} {
		if code, body := post(t, h, good, auth); code != http.StatusUnauthorized {
			t.Errorf("POST without the token (%q) = %d %s, want 401", auth, code, body)
		}
	}
	off := observe.Handler(observe.Daemon{Scheduler: sched, Store: store, Replica: "r1"})
	if code, body := post(t, off, good, "Bearer "+testToken); code != http.StatusForbidden {
		t.Errorf("POST with no token configured = %d %s, want 403", code, body)
	}
	if n := ran.Load(); n != 0 {
		t.Fatalf("a refused request ran %d slots", n)
	}
	for _, c := range []struct {
		path string
		code int
		says string
	}{
		{path("report", "yesterday", to.Format(time.RFC3339)), http.StatusBadRequest, `from=\"yesterday\"`},
		{path("nope", from.Format(time.RFC3339), to.Format(time.RFC3339)), http.StatusNotFound, `no task \"nope\"`},
		{path("report", to.Format(time.RFC3339), from.Format(time.RFC3339)), http.StatusUnprocessableEntity, "is not before to"},
		{path("report", from.Format(time.RFC3339), to.Add(3*time.Hour).Format(time.RFC3339)), http.StatusUnprocessableEntity, "in the future"},
		{path("report", to.Add(-2000*time.Hour).Format(time.RFC3339), to.Format(time.RFC3339)), http.StatusUnprocessableEntity, "2000 slots; at most 1000"},
	} {
		code, body := postRunning(t, h, c.path)
		if code != c.code || !strings.Contains(body, c.says) {
			t.Errorf("POST %s = %d %s; want %d saying %q", c.path, code, body, c.code, c.says)
		}
	}
	code, body := postRunning(t, h, good)
	if code != http.StatusAccepted {
		t.Fatalf("POST %s = %d %s, want 202", good, code, body)
	}
	var rep observe.BackfillReply
	if err := json.Unmarshal([]byte(body), &rep); err != nil || rep.Task != "report" || rep.Slots != 3 ||
		rep.First != task.Schedule.SlotID(from) || rep.Last != task.Schedule.SlotID(to.Add(-time.Hour)) {
		t.Fatalf("answer %s (%v): want 3 slots from %s", body, err, task.Schedule.SlotID(from))
	}
	for deadline := time.Now().Add(10 * time.Second); sched.Stats().Task("report").BackfillLeft.Load() > 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the backfill did not finish within 10s")
		}
	}
	if n := ran.Load(); n != 3 {
		t.Errorf("ran %d slots, want 3", n)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/tasks/report", nil))
	if page := rec.Body.String(); strings.Count(page, ">backfilled</span>") != 3 {
		t.Errorf("the task page marks %d attempts backfilled, want 3", strings.Count(page, ">backfilled</span>"))
	}
}

// postRunning posts path with the token, again while the daemon's
// scheduler has not started its loop yet (its answer says so).
func postRunning(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		code, body := post(t, h, path, "Bearer "+testToken)
		if !strings.Contains(body, scheduler.ErrNotRunning.Error()) || time.Now().After(deadline) {
			return code, body
		}
	}
}
