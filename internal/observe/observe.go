// Package observe is how a running slotd is watched: its HTTP endpoints —
// /metrics, /healthz, /readyz, the fleet's status as JSON
// (/api/v1/tasks) and as a page (/) — the one writer of the engine's
// metrics, and the fleet view that `slotd status` prints.
//
// Guarantees: /metrics is the only exposition of slotd's series, in the
// Prometheus text format (0.0.4), with the names and labels of SPEC §7;
// labels are bounded (task, result, outcome), never a slot id. A scrape
// reads the engine's atomic counters and allocates about one buffer,
// whatever the number of tasks. The status view only reads the store and
// the history: it needs no running daemon, and a value from the store or
// a task's output is escaped on the page. The page and the API read the
// fleet at most once per ViewTTL, whoever asks, and carry a strict
// Content-Security-Policy and the other security headers. The server
// (NewServer, Serve) closes idle and slow connections and keeps at most
// MaxConns open, so that clients cannot take the descriptors tasks need.
package observe

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/scheduler"
)

// Bounds of the status endpoints.
const (
	// DefaultSlots is how many slots per task the status shows unless asked.
	DefaultSlots = 10
	// MaxSlots bounds ?n=: each slot costs the store three reads per task,
	// and the page's size grows with it (200 tasks × 50 slots is 30,000
	// reads, once per ViewTTL).
	MaxSlots    = 50
	pageTimeout = 5 * time.Second
)

// Daemon is what the endpoints observe: one replica's scheduler and the
// fleet's shared state.
type Daemon struct {
	Scheduler *scheduler.Scheduler
	// Gatherer holds the process's other series (Go runtime, process,
	// build info), written before the engine's; nil: none.
	Gatherer     prometheus.Gatherer
	Store        lock.Store
	History      scheduler.History // nil: no history
	Replica      string            // shown on the page
	MaxClockSkew time.Duration     // beyond it /readyz fails; 0: not checked
}

// Handler serves d's endpoints: /metrics, /healthz, /readyz,
// /api/v1/tasks and the status page at /.
func Handler(d Daemon) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metricsHandler(d.Gatherer, d.Scheduler))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		ok, skew := d.Scheduler.Healthy()
		refusal, refused := d.Scheduler.Refused()
		switch {
		case refused:
			// Before "unreachable": the probe's refusal also clears ok, and
			// the operator needs the class and the fix, not a guess.
			http.Error(w, fmt.Sprintf("not ready: Redis refuses writes (%s on %s): %s; slotd cannot claim\n%s",
				refusal.Kind.Code(), refusal.Op, refusal.Kind.Fix(), refusal.Err), http.StatusServiceUnavailable)
		case !ok:
			http.Error(w, "not ready: store unreachable", http.StatusServiceUnavailable)
		case d.MaxClockSkew > 0 && skew.Abs() > d.MaxClockSkew:
			http.Error(w, fmt.Sprintf("not ready: clock skew %v exceeds max_clock_skew %v", skew, d.MaxClockSkew),
				http.StatusServiceUnavailable)
		default:
			fmt.Fprintln(w, "ready")
		}
	})
	statusRoutes(mux, d)
	return secure(mux)
}

// Report reads the fleet's status of tasks at the store's time, n slots
// per task.
func Report(ctx context.Context, tasks []scheduler.Task, store lock.Store, hist scheduler.History, n int) (StatusReport, error) {
	now, err := store.Time(ctx)
	if err != nil {
		return StatusReport{}, err
	}
	ts, err := Status(ctx, tasks, store, hist, now, n)
	return StatusReport{Now: now, Tasks: ts}, err
}

// WriteJSON writes v as indented JSON, as the status API and `slotd
// status -json` do.
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// statusRoutes serves the fleet view: /api/v1/tasks (the JSON of `slotd
// status -json`) and / (the status page). ?n= sets the slots per task, up
// to MaxSlots. Both share one view, read at most once per ViewTTL.
func statusRoutes(mux *http.ServeMux, d Daemon) {
	v := &view{tasks: d.Scheduler.Tasks, store: d.Store, hist: d.History, ttl: ViewTTL}
	slots := func(r *http.Request) int {
		n, err := strconv.Atoi(r.URL.Query().Get("n"))
		if err != nil || n < 1 {
			return DefaultSlots
		}
		return min(n, MaxSlots)
	}
	mux.HandleFunc("GET /api/v1/tasks", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), pageTimeout)
		defer cancel()
		rep, err := v.get(ctx, slots(r))
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		if err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = WriteJSON(w, map[string]string{"error": err.Error()})
			return
		}
		_ = WriteJSON(w, rep)
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), pageTimeout)
		defer cancel()
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		b, failed, err := v.page(ctx, slots(r), d.Replica)
		if err != nil {
			// The request ended, or the page failed to render.
			b, failed = nil, true
			var buf bytes.Buffer
			if WritePage(&buf, Page{StatusReport: StatusReport{Now: time.Now()}, Replica: d.Replica, Error: err.Error()}) == nil {
				b = buf.Bytes()
			}
		}
		if failed {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_, _ = w.Write(b)
	})
}
