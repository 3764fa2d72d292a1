package observe

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/scheduler"
)

// The write endpoints — POST /api/v1/tasks/{name}/trigger, .../pause,
// .../resume and /api/v1/reload — change the fleet's state. Each requires
// the bearer token of the config ([http] token_file or token_env),
// compared in constant time; with none configured they answer 403 and
// change nothing.
const (
	// IdempotencyHeader names a trigger request's idempotency key (or the
	// JSON body's "idempotency_key").
	IdempotencyHeader = "Idempotency-Key"
	// MaxIdempotencyKey bounds an idempotency key's length.
	MaxIdempotencyKey = 128
	maxWriteBody      = 4 << 10
	writeTimeout      = 10 * time.Second
)

// ErrInvalidConfig, wrapped by an error of Daemon.Reload, says that the
// config file is at fault (invalid, unreadable or missing) rather than the
// daemon: POST /api/v1/reload answers 422 instead of 500. Its text reaches
// the operator as the start of the error's.
var ErrInvalidConfig = errors.New("invalid config")

// compareTokens is how a request's token is checked: in constant time,
// over SHA-256 digests so that not even the lengths are compared early.
// A variable so that a test can see it used.
var compareTokens = func(got, want string) bool {
	g, w := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(g[:], w[:]) == 1
}

// writeRoutes serves the write endpoints of d.
func writeRoutes(mux *http.ServeMux, d Daemon) {
	ctl, _ := d.Store.(lock.Controls)
	task := func(w http.ResponseWriter, r *http.Request) (*scheduler.Task, bool) {
		if !authorized(w, r, d.Token) {
			return nil, false
		}
		if ctl == nil {
			writeError(w, http.StatusNotImplemented, fmt.Sprintf("the store (%T) keeps no operator controls", d.Store))
			return nil, false
		}
		// The task list as the last reload left it.
		name := r.PathValue("name")
		ts := d.Scheduler.Tasks()
		for i := range ts {
			if ts[i].Name == name {
				return &ts[i], true
			}
		}
		writeError(w, http.StatusNotFound, fmt.Sprintf("no task %q in this daemon's config", name))
		return nil, false
	}
	mux.HandleFunc("POST /api/v1/tasks/{name}/trigger", func(w http.ResponseWriter, r *http.Request) {
		t, ok := task(w, r)
		if !ok {
			return
		}
		key, err := idempotencyKey(r)
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), writeTimeout)
		defer cancel()
		tr, err := ctl.Trigger(ctx, t.Name, key, t.Window())
		if err != nil {
			writeError(w, http.StatusServiceUnavailable, err.Error())
			return
		}
		slot := t.TriggerSlot(tr.Time)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		_ = WriteJSON(w, TriggerReply{Task: t.Name, Slot: slot.ID, Time: slot.Time, Deadline: slot.Deadline, Result: tr.Result.String()})
	})
	for _, op := range []struct {
		path string
		op   lock.PauseOp
	}{{"pause", lock.Pause}, {"resume", lock.Resume}} {
		mux.HandleFunc("POST /api/v1/tasks/{name}/"+op.path, func(w http.ResponseWriter, r *http.Request) {
			t, ok := task(w, r)
			if !ok {
				return
			}
			ctx, cancel := context.WithTimeout(r.Context(), writeTimeout)
			defer cancel()
			paused, err := ctl.SetPaused(ctx, t.Name, op.op)
			if err != nil {
				writeError(w, http.StatusServiceUnavailable, err.Error())
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_ = WriteJSON(w, PauseReply{Task: t.Name, Paused: paused})
		})
	}
	backfillRoute(mux, d)
	mux.HandleFunc("POST /api/v1/reload", func(w http.ResponseWriter, r *http.Request) {
		if !authorized(w, r, d.Token) {
			return
		}
		if d.Reload == nil {
			writeError(w, http.StatusNotImplemented, "this daemon cannot reload its config: restart it")
			return
		}
		if err := d.Reload(r.Context()); err != nil {
			// The operator's file is at fault (422), or the daemon (500).
			status := http.StatusInternalServerError
			if errors.Is(err, ErrInvalidConfig) {
				status = http.StatusUnprocessableEntity
			}
			writeError(w, status, "reload failed, the running config stays: "+err.Error())
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = WriteJSON(w, map[string]bool{"reloaded": true})
	})
}

// TriggerReply is the answer to POST /api/v1/tasks/{name}/trigger.
type TriggerReply struct {
	Task     string    `json:"task"`
	Slot     string    `json:"slot"`     // the triggered slot's id, "<yyyymmddhhmmss>t"
	Time     time.Time `json:"time"`     // its slot time
	Deadline time.Time `json:"deadline"` // no attempt starts after it
	// Result: "started", "coalesced" (the task had a trigger in the same
	// second: that one) or "repeated" (the idempotency key was seen: its
	// trigger, and no new run).
	Result string `json:"result"`
}

// PauseReply is the answer to POST /api/v1/tasks/{name}/pause and resume.
type PauseReply struct {
	Task   string `json:"task"`
	Paused bool   `json:"paused"`
}

// authorized checks r's bearer token against token, answering the
// request itself if it fails. No token configured: the endpoint is
// disabled.
func authorized(w http.ResponseWriter, r *http.Request, token string) bool {
	if token == "" {
		writeError(w, http.StatusForbidden, "write endpoints are disabled: set [http] token_file or token_env in the config to enable them")
		return false
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || got == "" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="slotd"`)
		writeError(w, http.StatusUnauthorized, "missing bearer token: send Authorization: Bearer <token>")
		return false
	}
	if !compareTokens(got, token) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="slotd", error="invalid_token"`)
		writeError(w, http.StatusUnauthorized, "wrong bearer token")
		return false
	}
	return true
}

// idempotencyKey is the trigger request's key: the header, or the JSON
// body's "idempotency_key"; "" if neither.
func idempotencyKey(r *http.Request) (string, error) {
	key := r.Header.Get(IdempotencyHeader)
	if r.ContentLength != 0 && key == "" {
		var body struct {
			Key string `json:"idempotency_key"`
		}
		dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, maxWriteBody))
		if err := dec.Decode(&body); err != nil && !errors.Is(err, io.EOF) {
			return "", fmt.Errorf("request body: want JSON such as {\"idempotency_key\": \"...\"}: %v", err)
		}
		key = body.Key
	}
	if len(key) > MaxIdempotencyKey || strings.IndexFunc(key, func(c rune) bool { return c <= ' ' || c > '~' }) >= 0 {
		return "", fmt.Errorf("idempotency key: want at most %d printable ASCII characters without spaces", MaxIdempotencyKey)
	}
	return key, nil
}

// writeError answers with status and {"error": msg}.
func writeError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = WriteJSON(w, map[string]string{"error": msg})
}
