package observe_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/observe"
	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/lock/redislock"
	"github.com/slotd/slotd/scheduler"
)

// Keys of the wrong type planted in a real Redis — one task's slot key,
// another's history stream, a third's pause key — cost each of those
// tasks alone: /api/v1/tasks, the overview and each task's page answer
// 200 (but the page of the task whose attempts cannot be read), the three
// tasks say what could not be read, and the fourth reads in full.
func TestWrongTypeKeysArePerTask(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	ctx := context.Background()
	st := redislock.New(rdb, "slotd")
	hist := redislock.NewHistory(rdb, "slotd", time.Hour)
	t.Cleanup(hist.Close)
	var tasks []scheduler.Task
	for _, name := range []string{"slotkey", "stream", "pause", "fine"} {
		task := statusTask(t, name, "@every 24h", 3, 47*time.Hour)
		task.Deadline = 47 * time.Hour
		tasks = append(tasks, task)
	}
	now, err := st.Time(ctx)
	if err != nil {
		t.Fatal(err)
	}
	at, _ := tasks[0].Schedule.Latest(now)
	state, _ := redislock.Keys("slotd", tasks[0].Slot(at))
	_, paused, _, _ := redislock.ControlKeys("slotd", "pause")
	for _, key := range []string{state, redislock.HistoryKey("slotd", "stream"), paused} {
		if err := rdb.SAdd(ctx, key, "planted").Err(); err != nil {
			t.Fatal(err)
		}
	}
	sched := scheduler.New(tasks, st, scheduler.WithReplica("r1"), scheduler.WithLogger(slog.New(slog.DiscardHandler)))
	h := observe.Handler(observe.Daemon{Scheduler: sched, Store: st, History: hist, Replica: "r1"})
	get := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code, rec.Body.String()
	}

	code, body := get("/api/v1/tasks")
	var rep observe.StatusReport
	if code != http.StatusOK || json.Unmarshal([]byte(body), &rep) != nil || len(rep.Tasks) != 4 {
		t.Fatalf("GET /api/v1/tasks: %d\n%s", code, body)
	}
	want := map[string]string{"slotkey": "slot " + tasks[0].Slot(at).ID, "stream": "history: read stream", "pause": "pause state"}
	for _, ts := range rep.Tasks {
		w, bad := want[ts.Name]
		switch {
		case bad && (!strings.Contains(ts.ReadError, w) || !strings.Contains(ts.ReadError, "WRONGTYPE")):
			t.Errorf("%s's read_error = %q, want it to say %q and WRONGTYPE", ts.Name, ts.ReadError, w)
		case !bad && (ts.ReadError != "" || len(ts.Slots) != observe.DefaultSlots):
			t.Errorf("fine, whose keys are fine: read_error %q, %d slots", ts.ReadError, len(ts.Slots))
		}
	}
	if code, body := get("/"); code != http.StatusOK || !strings.Contains(body, "WRONGTYPE") {
		t.Errorf("GET /: %d, or the overview does not show a task's read error", code)
	}
	for _, name := range []string{"slotkey", "pause", "fine"} {
		if code, _ := get("/tasks/" + name); code != http.StatusOK {
			t.Errorf("GET /tasks/%s: %d, want 200", name, code)
		}
	}
	// The page of the task whose history is not a stream cannot show its
	// attempts: it says why, as its history endpoint does.
	if code, body := get("/tasks/stream"); code != http.StatusServiceUnavailable || !strings.Contains(body, "WRONGTYPE") {
		t.Errorf("GET /tasks/stream: %d, or the page does not say why its attempts are missing", code)
	}
}
