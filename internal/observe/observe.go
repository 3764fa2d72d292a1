// Package observe is how a running slotd is watched: its HTTP endpoints —
// /metrics, /healthz, /readyz, the fleet's status as JSON
// (/api/v1/tasks, /api/v1/tasks/{name}, /api/v1/tasks/{name}/history) and
// as pages (the overview at /, a task's page at /tasks/{name}) — the one
// writer of the engine's metrics, and the fleet view that `slotd status`
// prints.
//
// Guarantees: /metrics is the only exposition of slotd's series, in the
// Prometheus text format (0.0.4), with the names and labels of SPEC §7;
// labels are bounded (task, result, outcome), never a slot id. A scrape
// reads the engine's atomic counters and allocates about one buffer,
// whatever the number of tasks. The status views only read the store and
// the history: they need no running daemon, and a value from the store,
// the configuration or a task's output is escaped on the pages. Every
// view is read at most once per ViewTTL, whoever asks, and at most
// MaxReads reads of the store are in flight at once (a request beyond is
// answered 503 at once, never queued); the overview reads OverviewSlots
// slots per task and shows at most MaxPerPage tasks, /api/v1/tasks reads
// only the page of tasks asked for, so neither grows with the fleet, and a
// page of history reads at most MaxAttempts+1 entries, holding about
// MaxPageBytes. A task whose keys cannot be read carries its own
// ReadError; the others read in full. Every response carries a strict
// Content-Security-Policy (a task's page runs its one script, by hash)
// and the other security headers. The server (NewServer, Serve) closes
// idle and slow connections and keeps at most MaxConns open, so that
// clients cannot take the descriptors tasks need.
package observe

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
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
	// Token is the bearer token of the write endpoints ([http] token_file
	// or token_env); "": they are disabled (403).
	Token string
	// Reload re-reads and applies the config (POST /api/v1/reload); nil:
	// the endpoint answers 501. An error that wraps ErrInvalidConfig
	// answers 422, any other 500; either way its text is the JSON error.
	Reload func(context.Context) error
}

// Handler serves d's endpoints: /metrics, /healthz, /readyz,
// /api/v1/tasks, the status page at /, and the write endpoints behind
// d.Token (see writeRoutes).
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
	writeRoutes(mux, d)
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
