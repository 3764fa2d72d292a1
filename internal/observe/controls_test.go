package observe_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/observe"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/memlock"
	"github.com/slotd/slotd/scheduler"
)

const testToken = "0123456789abcdef-test-token"

// writeServer is the handler of a daemon over a Memory store, with token
// (none if "") and reload.
func writeServer(t *testing.T, token string, reload func(context.Context) error) (http.Handler, *memlock.Store) {
	t.Helper()
	store := memlock.New(nil)
	tasks := []scheduler.Task{statusTask(t, "report", "@every 1h", 3, 48*time.Hour)}
	sched := scheduler.New(tasks, store, scheduler.WithReplica("r1"), scheduler.WithLogger(slog.New(slog.DiscardHandler)))
	return observe.Handler(observe.Daemon{Scheduler: sched, Store: store, Replica: "r1", Token: token, Reload: reload}), store
}

func post(t *testing.T, h http.Handler, path, auth string, hdr ...string) (int, string) {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, path, nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	b, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, string(b)
}

// Every write endpoint refuses a missing or wrong token and changes
// nothing; the right one is compared through the constant-time compare.
func TestWriteEndpointsNeedToken(t *testing.T) {
	calls := 0
	var orig func(got, want string) bool
	orig, restore := observe.SetCompareTokens(func(got, want string) bool { calls++; return orig(got, want) })
	defer restore()
	reloads := 0
	h, store := writeServer(t, testToken, func(context.Context) error { reloads++; return nil })
	paths := []string{"/api/v1/tasks/report/trigger", "/api/v1/tasks/report/pause", "/api/v1/tasks/report/resume", "/api/v1/reload"}
	for _, p := range paths {
		for _, auth := range []string{"", "Bearer", "Bearer wrong-token-0123456789", "Basic " + testToken, "Bearer " + testToken + "x"} {
			if code, body := post(t, h, p, auth); code != http.StatusUnauthorized || !strings.Contains(body, "token") {
				t.Errorf("POST %s with Authorization %q = %d %s, want 401", p, auth, code, body)
			}
		}
	}
	if paused, _ := store.Paused(context.Background(), []string{"report"}, false); paused[0] {
		t.Fatal("a refused pause paused the task")
	}
	if ts, _ := store.Triggers(context.Background(), []string{"report"}); len(ts[0]) != 0 {
		t.Fatal("a refused trigger triggered the task")
	}
	if reloads != 0 {
		t.Fatal("a refused reload reloaded")
	}
	before := calls
	for _, p := range paths {
		if code, body := post(t, h, p, "Bearer "+testToken); code/100 != 2 {
			t.Errorf("POST %s with the token = %d %s", p, code, body)
		}
	}
	if calls-before != len(paths) {
		t.Errorf("the constant-time compare ran %d times for %d requests", calls-before, len(paths))
	}
	if reloads != 1 {
		t.Errorf("reloads = %d, want 1", reloads)
	}
	if !orig(testToken, testToken) || orig(testToken, testToken[:10]) || orig(testToken[:10], testToken) {
		t.Error("the comparison itself is wrong")
	}
}

// Without a token in the config the write endpoints are off, whatever the
// request carries.
func TestWriteEndpointsDisabledWithoutToken(t *testing.T) {
	h, _ := writeServer(t, "", nil)
	for _, p := range []string{"/api/v1/tasks/report/trigger", "/api/v1/tasks/report/pause", "/api/v1/tasks/report/resume", "/api/v1/reload"} {
		code, body := post(t, h, p, "Bearer "+testToken)
		if code != http.StatusForbidden || !strings.Contains(body, "token_file or token_env") {
			t.Errorf("POST %s = %d %s, want 403 naming the config keys", p, code, body)
		}
	}
}

func TestTriggerPauseReloadAnswers(t *testing.T) {
	h, store := writeServer(t, testToken, func(context.Context) error { return errors.New("scheduler: stopped") })
	auth := "Bearer " + testToken
	code, body := post(t, h, "/api/v1/tasks/report/trigger", auth, observe.IdempotencyHeader, "deploy-42")
	var first observe.TriggerReply
	if err := json.Unmarshal([]byte(body), &first); code != http.StatusAccepted || err != nil || first.Result != "started" || !(lock.Slot{ID: first.Slot}).Triggered() {
		t.Fatalf("trigger = %d %s", code, body)
	}
	code, body = post(t, h, "/api/v1/tasks/report/trigger", auth, observe.IdempotencyHeader, "deploy-42")
	var again observe.TriggerReply
	if err := json.Unmarshal([]byte(body), &again); code != http.StatusAccepted || err != nil || again.Result != "repeated" || again.Slot != first.Slot {
		t.Fatalf("repeated trigger = %d %s, want repeated %s", code, body, first.Slot)
	}
	if code, body := post(t, h, "/api/v1/tasks/report/trigger", auth, observe.IdempotencyHeader, "has space"); code != http.StatusBadRequest {
		t.Errorf("bad key = %d %s", code, body)
	}
	if code, body := post(t, h, "/api/v1/tasks/nope/pause", auth); code != http.StatusNotFound || !strings.Contains(body, "nope") {
		t.Errorf("unknown task = %d %s", code, body)
	}
	if code, body := post(t, h, "/api/v1/tasks/report/pause", auth); code != http.StatusOK || !strings.Contains(body, `"paused": true`) {
		t.Errorf("pause = %d %s", code, body)
	}
	if paused, _ := store.Paused(context.Background(), []string{"report"}, false); !paused[0] {
		t.Error("not paused in the store")
	}
	if code, body := post(t, h, "/api/v1/reload", auth); code != http.StatusInternalServerError || !strings.Contains(body, "running config stays") {
		t.Errorf("reload failed inside the daemon = %d %s, want 500", code, body)
	}
	h2, _ := writeServer(t, testToken, nil)
	if code, _ := post(t, h2, "/api/v1/reload", auth); code != http.StatusNotImplemented {
		t.Errorf("reload without a hook = %d, want 501", code)
	}
}

// A reload refused because of the file is the operator's to fix: 422,
// with the error that names the task and key in the JSON body.
func TestReloadInvalidConfigIs422(t *testing.T) {
	bad := fmt.Errorf("%w: slotd.toml: task \"x\": schedule: bad", observe.ErrInvalidConfig)
	h, _ := writeServer(t, testToken, func(context.Context) error { return fmt.Errorf("reload: %w", bad) })
	code, body := post(t, h, "/api/v1/reload", "Bearer "+testToken)
	var e struct{ Error string }
	if err := json.Unmarshal([]byte(body), &e); err != nil || code != http.StatusUnprocessableEntity ||
		!strings.Contains(e.Error, "running config stays") || !strings.Contains(e.Error, `task "x": schedule: bad`) {
		t.Errorf("reload of an invalid file = %d %s, want 422 with the error naming task x and its schedule", code, body)
	}
}
