package observe

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/slotd/slotd/scheduler"
)

// backfillRoute serves POST /api/v1/tasks/{name}/backfill?from=T&to=T
// (RFC 3339 times; the range is [from, to)): the receiving daemon runs
// every scheduled slot of the task in the range once, oldest first
// (scheduler.Backfill). It answers 202 with the plan (BackfillReply), 404
// for an unknown task, 422 for a range or task it refuses (the error
// names the value), 429 when MaxBackfills are under way, 503 while the
// daemon's scheduler is not running (starting, or stopping). Token-protected like the other write endpoints.
func backfillRoute(mux *http.ServeMux, d Daemon) {
	mux.HandleFunc("POST /api/v1/tasks/{name}/backfill", func(w http.ResponseWriter, r *http.Request) {
		if !authorized(w, r, d.Token) {
			return
		}
		q := r.URL.Query()
		var at [2]time.Time
		for i, key := range []string{"from", "to"} {
			v := q.Get(key)
			t, err := time.Parse(time.RFC3339, v)
			if err != nil {
				writeError(w, http.StatusBadRequest, fmt.Sprintf("query parameter %s=%q: want an RFC 3339 time such as 2024-01-15T14:00:00Z", key, clip(v)))
				return
			}
			at[i] = t
		}
		ctx, cancel := context.WithTimeout(r.Context(), writeTimeout)
		defer cancel()
		plan, err := d.Scheduler.Backfill(ctx, r.PathValue("name"), at[0], at[1])
		if err != nil {
			status := http.StatusServiceUnavailable
			switch {
			case errors.Is(err, scheduler.ErrBackfillTask) && !hasTask(d, r.PathValue("name")):
				status = http.StatusNotFound
			case errors.Is(err, scheduler.ErrBackfillBusy):
				status = http.StatusTooManyRequests
			case errors.Is(err, scheduler.ErrBackfillTask), errors.Is(err, scheduler.ErrBackfillRange), errors.Is(err, scheduler.ErrBackfillLimit):
				status = http.StatusUnprocessableEntity
			}
			writeError(w, status, err.Error())
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		_ = WriteJSON(w, BackfillReply(plan))
	})
}

// BackfillReply is the answer to POST /api/v1/tasks/{name}/backfill: the
// slots queued on the daemon that took the request.
type BackfillReply scheduler.BackfillPlan

// hasTask reports whether the daemon's config has a task named name.
func hasTask(d Daemon, name string) bool {
	for _, t := range d.Scheduler.Tasks() {
		if t.Name == name {
			return true
		}
	}
	return false
}

// clip bounds a client's value quoted back in an error.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
