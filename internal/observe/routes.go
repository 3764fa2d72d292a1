package observe

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/slotd/slotd/scheduler"
)

// statusRoutes serves the fleet's state, every read shared for ViewTTL
// (see shared):
//   - /api/v1/tasks, the JSON of `slotd status -json`, ?n= slots per task
//     up to MaxSlots, a page of tasks at a time (?page=, ?per= tasks, by
//     default and at most MaxPerPage);
//   - /, the overview: every task counted by state, and a page of them,
//     failing first (?q= part of a name, ?state=, ?page=, ?per=);
//   - /tasks/{name}, a task's page: its schedule, next fire times, recent
//     slots (?n=), a page of attempts (?before=, ?limit=) and its actions;
//   - /api/v1/tasks/{name} and /api/v1/tasks/{name}/history, the same as
//     JSON. An unknown task is a 404 that names it.
func statusRoutes(mux *http.ServeMux, d Daemon) {
	tasks := d.Scheduler.Tasks
	gate := newReadGate() // one for all: MaxReads in flight per server
	v := &view{tasks: tasks, store: d.Store, hist: d.History, reads: shared[StatusReport]{ttl: ViewTTL, gate: gate}}
	overview := &shared[fleetSummary]{ttl: ViewTTL, gate: gate}
	details := &shared[TaskDetail]{ttl: ViewTTL, gate: gate}
	attempts := &shared[Attempts]{ttl: ViewTTL, gate: gate}

	detail := func(ctx context.Context, t *scheduler.Task, n int) (TaskDetail, error) {
		return details.get(ctx, t.Name+"\x00"+strconv.Itoa(n), func(ctx context.Context) (TaskDetail, error) {
			return Detail(ctx, t, d.Store, d.History, n)
		})
	}
	history := func(ctx context.Context, name, before string, limit int) (Attempts, error) {
		if _, _, ok := streamID(before); before != "" && !ok {
			return Attempts{}, fmt.Errorf("%w: %q", ErrBadCursor, before)
		}
		return attempts.get(ctx, name+"\x00"+before+"\x00"+strconv.Itoa(limit), func(ctx context.Context) (Attempts, error) {
			return ReadAttempts(ctx, d.History, name, before, limit)
		})
	}

	mux.HandleFunc("GET /api/v1/tasks", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), pageTimeout)
		defer cancel()
		f := filterOf(r.URL.Query()) // ?page=, ?per=
		per := f.Per
		if r.URL.Query().Get("per") == "" {
			per = MaxPerPage
		}
		rep, err := v.get(ctx, slots(r), f.Page, per)
		writeJSON(w, rep, err)
	})
	mux.HandleFunc("GET /api/v1/tasks/{name}", func(w http.ResponseWriter, r *http.Request) {
		t, ok := find(tasks(), r.PathValue("name"))
		if !ok {
			notFound(w, r.PathValue("name"))
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), pageTimeout)
		defer cancel()
		det, err := detail(ctx, t, slots(r))
		writeJSON(w, det, err)
	})
	mux.HandleFunc("GET /api/v1/tasks/{name}/history", func(w http.ResponseWriter, r *http.Request) {
		t, ok := find(tasks(), r.PathValue("name"))
		if !ok {
			notFound(w, r.PathValue("name"))
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), pageTimeout)
		defer cancel()
		a, err := history(ctx, t.Name, r.URL.Query().Get("before"), limit(r))
		if errors.Is(err, ErrBadCursor) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_ = WriteJSON(w, map[string]string{"error": err.Error()})
			return
		}
		writeJSON(w, a, err)
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), pageTimeout)
		defer cancel()
		sum, err := overview.get(ctx, "", func(ctx context.Context) (fleetSummary, error) {
			return summarize(ctx, tasks(), d.Store, d.History)
		})
		p := Page{Overview: sum.page(filterOf(r.URL.Query())), Replica: d.Replica}
		if err != nil {
			p.Error = err.Error()
			if p.Now.IsZero() {
				p.Now = time.Now()
			}
		}
		writeHTML(w, err, func(b *bytes.Buffer) error { return WritePage(b, p) })
	})
	mux.HandleFunc("GET /tasks/{name}", func(w http.ResponseWriter, r *http.Request) {
		t, ok := find(tasks(), r.PathValue("name"))
		if !ok {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.WriteHeader(http.StatusNotFound)
			_ = WriteTaskPage(w, TaskPage{NotFound: r.PathValue("name"), Replica: d.Replica})
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), pageTimeout)
		defer cancel()
		p := TaskPage{Replica: d.Replica}
		if d.Scheduler != nil {
			st := d.Scheduler.Stats().Task(t.Name)
			p.Backfilling = st.BackfillLeft.Load()
			if id := st.WaitingSlot.Load(); id != nil {
				p.Waiting = *id
			}
		}
		var err error
		p.TaskDetail, err = detail(ctx, t, slots(r))
		if err == nil {
			p.Attempts, err = history(ctx, t.Name, r.URL.Query().Get("before"), limit(r))
		}
		if err != nil {
			p.Error = err.Error()
			if p.Now.IsZero() {
				p.Now = time.Now()
			}
		}
		// A failed read still names the task, for the page's title and
		// its buttons.
		p.Task.Name = t.Name
		w.Header().Set("Content-Security-Policy", taskPagePolicy)
		writeHTML(w, err, func(b *bytes.Buffer) error { return WriteTaskPage(b, p) })
	})
}

// slots is ?n=: the slots per task, DefaultSlots unless asked, at most
// MaxSlots.
func slots(r *http.Request) int {
	n, err := strconv.Atoi(r.URL.Query().Get("n"))
	if err != nil || n < 1 {
		return DefaultSlots
	}
	return min(n, MaxSlots)
}

// limit is ?limit=: the attempts per page, DefaultAttempts unless asked,
// at most MaxAttempts.
func limit(r *http.Request) int {
	n, err := strconv.Atoi(r.URL.Query().Get("limit"))
	if err != nil || n < 1 {
		return DefaultAttempts
	}
	return min(n, MaxAttempts)
}

// find returns the task named name.
func find(tasks []scheduler.Task, name string) (*scheduler.Task, bool) {
	for i := range tasks {
		if tasks[i].Name == name {
			return &tasks[i], true
		}
	}
	return nil, false
}

// notFound answers a JSON request about an unknown task with 404, naming
// it.
func notFound(w http.ResponseWriter, name string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNotFound)
	_ = WriteJSON(w, map[string]string{"error": fmt.Sprintf("no task named %q", name)})
}

// writeJSON answers with v, or with 503 and err if the store could not be
// read.
func writeJSON(w http.ResponseWriter, v any, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if errors.Is(err, ErrBusy) {
		w.Header().Set("Retry-After", "1")
	}
	if err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		_ = WriteJSON(w, map[string]string{"error": err.Error()})
		return
	}
	_ = WriteJSON(w, v)
}

// writeHTML renders a page into a buffer and sends it, with 503 if its
// read failed with err (the page then says why); a page that fails to
// render is a 500.
func writeHTML(w http.ResponseWriter, err error, render func(*bytes.Buffer) error) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	failed := err != nil
	if errors.Is(err, ErrBusy) {
		w.Header().Set("Retry-After", "1")
	}
	var b bytes.Buffer
	if err := render(&b); err != nil {
		http.Error(w, "the page failed to render: "+err.Error(), http.StatusInternalServerError)
		return
	}
	if failed {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_, _ = w.Write(b.Bytes())
}
