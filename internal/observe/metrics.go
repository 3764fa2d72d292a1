package observe

import (
	"bufio"
	"compress/gzip"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/slotd/slotd/internal/stats"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/scheduler"
)

// The engine's families, as WriteMetrics writes them.
const (
	helpClaims        = "Slot claims by result: won, held, done, exhausted, early, late, error."
	helpRuns          = "Task attempts run on this replica by outcome: success, failure, timeout, lease_lost, canceled, success_unmarked, superseded, record_lost."
	helpDuration      = "How long task attempts ran."
	helpStartDelay    = "How long after its slot time an attempt started."
	helpRenewals      = "Lease renewals confirmed by the store."
	helpLeaseLosses   = "Leases lost while a task ran (the task was cancelled)."
	helpExhausted     = "Slots whose last allowed attempt failed on this replica."
	helpBackfilled    = "Slots of a past range that an operator's backfill started on this replica (each is claimed as a fired slot; a slot already done is not run again)."
	helpMissed        = "Slots this replica saw close without a success and without exhausting their attempts."
	helpLastSuccess   = "Slot time of the task's latest slot completed by this replica, in Unix seconds."
	helpBackfillLeft  = "Slots of the operators' backfills under way on this replica that have not ended yet (queued or started)."
	helpRunning       = "Task attempts running on this replica."
	helpWaiting       = "Task attempts on this replica waiting for their task's running slot to end (concurrency = \"queue\")."
	helpFinishErrors  = "Completions or releases that failed; the slot's lease then runs out on its own."
	helpNotifications = "on_failure hooks by outcome: success, failure (including a timeout; not retried), store_error (the once marker could not be set: not run), unsupported (the store has no once marker: not run), dropped (this replica already ran max_hooks hooks: not run here, left to a peer)."
	helpWindow        = "The task's slot window (deadline, or the longest gap between fire times): alerts scale with it."
	helpPaused        = "1 if the task is paused (slotd pause, or paused = true), as this replica last heard, else 0: its slots are skipped, not missed."
	helpSkipped       = "Slots not run, by reason: paused (the task was paused when the slot fired, counted on each replica), forbid (the previous slot still ran; concurrency = \"forbid\"), queue_full (another slot of the task already waited; concurrency = \"queue\")."
	helpRedisUp       = "1 if the last check of the store answered, its write probe was taken, and no recent write was refused, else 0."
	helpStoreErrors   = "Errors of the store's calls (claims, renewals, completions, releases, write probes) by kind: oom, noperm, readonly, misconf, noreplicas, noscript, auth, unavailable, timeout, conn, other."
	helpClockSkew     = "Store clock minus this replica's clock, as last measured."

	helpAttempts       = "Task attempts running on this replica, all tasks together: what [daemon] max_running caps."
	helpMaxRunning     = "This replica's [daemon] max_running; 0: no cap."
	helpCapacityWait   = "Slots this replica waits to claim because it is at max_running (peers may take them meanwhile)."
	helpMissedCapacity = "Of slotd_slots_missed_total, the slots this replica waited to claim, at max_running, until their window closed, and no peer started."
	helpMissedBackoff  = "Of slotd_slots_missed_total, the slots whose retry_backoff after a failed attempt ended at or after their deadline."
	helpMissedQueue    = "Of slotd_slots_missed_total, the slots whose window closed while they waited for their task's running slot (concurrency = \"queue\"); counted once for the fleet, by the waiter's replica."
)

// WriteMetrics writes the engine's series — the store's reachability
// (TIME and the write probe), the clock skew, the store's errors by kind,
// and every task's series — to w in the Prometheus text format
// (version 0.0.4), family by family, straight from the scheduler's
// counters. Every task's series exist at zero from the start, so that a
// replica's first failure after a start is an increase Prometheus can
// see; last_success stays absent until a success, since a zero there
// would read as "never succeeded" and page.
//
// Through client_golang's registry a scrape built an object per series
// first, about 17 KB a task; with 10,000 tasks every scrape allocated 170
// MB and kept most of it live until it was encoded, which took a replica's
// RSS from about 110 MB to 260-290 MB when scraped every few seconds. Here
// a scrape allocates a buffer.
func WriteMetrics(w io.Writer, s *scheduler.Scheduler) error {
	up, skew := s.Healthy()
	return writeText(w, s.Stats(), up, skew)
}

func writeText(w io.Writer, set *stats.Set, up bool, skew time.Duration) error {
	t := textWriter{w: bufio.NewWriterSize(w, 64<<10)}
	tasks := set.Tasks()
	counters := func(name, help string, v func(*stats.Task) *stats.Counter) {
		t.header(name, help, "counter")
		for _, st := range tasks {
			t.sample(name, st.Name, "", "", float64(v(st).Load()))
		}
	}
	gauges := func(name, help string, v func(*stats.Task) (float64, bool)) {
		t.header(name, help, "gauge")
		for _, st := range tasks {
			if x, ok := v(st); ok {
				t.sample(name, st.Name, "", "", x)
			}
		}
	}
	histograms := func(name, help string, h func(*stats.Task) *stats.Histogram) {
		t.header(name, help, "histogram")
		bucket, sum, count := name+"_bucket", name+"_sum", name+"_count"
		var les [stats.Buckets]string
		for _, st := range tasks {
			h := h(st)
			if les[0] == "" {
				for i, le := range h.Bounds() {
					les[i] = string(appendFloat(nil, le))
				}
			}
			var n uint64
			for i := range stats.Buckets {
				n += h.Bucket(i)
				t.sample(bucket, st.Name, "le", les[i], float64(n))
			}
			n += h.Bucket(stats.Buckets)
			t.sample(bucket, st.Name, "le", "+Inf", float64(n))
			t.sample(sum, st.Name, "", "", h.Sum())
			t.sample(count, st.Name, "", "", float64(n))
		}
	}

	t.header("slotd_redis_up", helpRedisUp, "gauge")
	upValue := 0.0
	if up {
		upValue = 1
	}
	t.plain("slotd_redis_up", upValue)
	t.header("slotd_clock_skew_seconds", helpClockSkew, "gauge")
	t.plain("slotd_clock_skew_seconds", skew.Seconds())
	t.header("slotd_store_errors_total", helpStoreErrors, "counter")
	for k := lock.KindNone + 1; k < lock.NumErrorKinds; k++ {
		t.labelled("slotd_store_errors_total", "kind", k.String(), float64(set.Store.Errors[k].Load()))
	}
	t.header("slotd_notifications_total", helpNotifications, "counter")
	for i, o := range stats.NotifyOutcomes {
		t.labelled("slotd_notifications_total", "outcome", string(o), float64(set.Notifications[i].Load()))
	}
	t.header("slotd_claims_total", helpClaims, "counter")
	for _, st := range tasks {
		for r := range st.Claims {
			result := stats.ResultError
			if r > 0 {
				result = lock.Result(r).String()
			}
			t.sample("slotd_claims_total", st.Name, "result", result, float64(st.Claims[r].Load()))
		}
	}
	t.header("slotd_runs_total", helpRuns, "counter")
	for _, st := range tasks {
		for i, o := range stats.Outcomes {
			t.sample("slotd_runs_total", st.Name, "outcome", string(o), float64(st.Runs[i].Load()))
		}
	}
	histograms("slotd_task_duration_seconds", helpDuration, func(st *stats.Task) *stats.Histogram { return &st.Duration })
	histograms("slotd_start_delay_seconds", helpStartDelay, func(st *stats.Task) *stats.Histogram { return &st.StartDelay })
	counters("slotd_lease_renewals_total", helpRenewals, func(st *stats.Task) *stats.Counter { return &st.Renewals })
	counters("slotd_lease_losses_total", helpLeaseLosses, func(st *stats.Task) *stats.Counter { return &st.LeaseLosses })
	counters("slotd_slots_exhausted_total", helpExhausted, func(st *stats.Task) *stats.Counter { return &st.Exhausted })
	counters("slotd_slots_missed_total", helpMissed, func(st *stats.Task) *stats.Counter { return &st.Missed })
	counters("slotd_slots_backfilled_total", helpBackfilled, func(st *stats.Task) *stats.Counter { return &st.Backfilled })
	counters("slotd_finish_errors_total", helpFinishErrors, func(st *stats.Task) *stats.Counter { return &st.FinishErrors })
	gauges("slotd_last_success_timestamp_seconds", helpLastSuccess, func(st *stats.Task) (float64, bool) {
		at, ok := st.LastSuccess()
		return float64(at.Unix()), ok
	})
	gauges("slotd_backfill_slots_pending", helpBackfillLeft, func(st *stats.Task) (float64, bool) { return float64(st.BackfillLeft.Load()), true })
	gauges("slotd_running_tasks", helpRunning, func(st *stats.Task) (float64, bool) { return float64(st.Running.Load()), true })
	gauges("slotd_waiting_tasks", helpWaiting, func(st *stats.Task) (float64, bool) { return float64(st.Waiting.Load()), true })
	gauges("slotd_task_window_seconds", helpWindow, func(st *stats.Task) (float64, bool) { return st.Window().Seconds(), true })
	gauges("slotd_task_paused", helpPaused, func(st *stats.Task) (float64, bool) {
		if st.Paused.Load() {
			return 1, true
		}
		return 0, true
	})
	t.header("slotd_slots_skipped_total", helpSkipped, "counter")
	for _, st := range tasks {
		for i, reason := range stats.SkipReasons {
			t.sample("slotd_slots_skipped_total", st.Name, "reason", reason, float64(st.Skipped[i].Load()))
		}
	}
	writeCapacity(&t, set, counters)
	return t.flush()
}

// writeCapacity writes the replica's running attempts against its
// max_running, and the slots missed for capacity.
func writeCapacity(t *textWriter, set *stats.Set, counters func(name, help string, v func(*stats.Task) *stats.Counter)) {
	t.header("slotd_running_attempts", helpAttempts, "gauge")
	t.plain("slotd_running_attempts", float64(set.Capacity.Running.Load()))
	t.header("slotd_max_running", helpMaxRunning, "gauge")
	t.plain("slotd_max_running", float64(set.Capacity.Max.Load()))
	t.header("slotd_capacity_waiting_slots", helpCapacityWait, "gauge")
	t.plain("slotd_capacity_waiting_slots", float64(set.Capacity.Waiting.Load()))
	counters("slotd_slots_missed_capacity_total", helpMissedCapacity, func(st *stats.Task) *stats.Counter { return &st.MissedCapacity })
	counters("slotd_slots_missed_backoff_total", helpMissedBackoff, func(st *stats.Task) *stats.Counter { return &st.MissedBackoff })
	counters("slotd_slots_missed_queue_total", helpMissedQueue, func(st *stats.Task) *stats.Counter { return &st.MissedQueue })
}

// metricsHandler serves reg's series (the process's: Go runtime, build
// info) and then the scheduler's (WriteMetrics) in the text format
// (0.0.4), gzipped if the scraper accepts it. It is the one exposition
// path of slotd's metrics. The text format is what Prometheus reads from
// every target that offers nothing else.
func metricsHandler(reg prometheus.Gatherer, sched *scheduler.Scheduler) http.Handler {
	format := expfmt.NewFormat(expfmt.TypeTextPlain)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var mfs []*dto.MetricFamily
		if reg != nil {
			var err error
			if mfs, err = reg.Gather(); err != nil {
				http.Error(w, "gathering metrics: "+err.Error(), http.StatusInternalServerError)
				return
			}
		}
		w.Header().Set("Content-Type", string(format))
		var out io.Writer = w
		if acceptsGzip(r) {
			w.Header().Set("Content-Encoding", "gzip")
			gz := gzipWriters.Get().(*gzip.Writer)
			gz.Reset(w)
			defer func() {
				_ = gz.Close()
				gzipWriters.Put(gz)
			}()
			out = gz
		}
		enc := expfmt.NewEncoder(out, format)
		for _, mf := range mfs {
			if err := enc.Encode(mf); err != nil {
				return // the scraper went away
			}
		}
		_ = WriteMetrics(out, sched)
	})
}

// gzipWriters are reused across scrapes: a new one allocates its
// compressor's state, several hundred kilobytes.
var gzipWriters = sync.Pool{New: func() any { return gzip.NewWriter(io.Discard) }}

// acceptsGzip reports whether r's Accept-Encoding lists gzip with a
// quality above zero.
func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		enc, params, _ := strings.Cut(part, ";")
		if strings.TrimSpace(enc) != "gzip" {
			continue
		}
		q, ok := strings.CutPrefix(strings.TrimSpace(params), "q=")
		if f, err := strconv.ParseFloat(q, 64); ok && err == nil && f == 0 {
			return false
		}
		return true
	}
	return false
}

// textWriter writes lines of the text format, keeping the first error.
type textWriter struct {
	w   *bufio.Writer
	b   []byte
	err error
}

func (t *textWriter) header(name, help, typ string) {
	t.b = append(t.b[:0], "# HELP "...)
	t.b = append(t.b, name...)
	t.b = append(t.b, ' ')
	t.b = append(t.b, help...) // constants: nothing to escape
	t.b = append(t.b, "\n# TYPE "...)
	t.b = append(t.b, name...)
	t.b = append(t.b, ' ')
	t.b = append(t.b, typ...)
	t.b = append(t.b, '\n')
	t.write()
}

// plain writes name v, a series without labels.
func (t *textWriter) plain(name string, v float64) {
	t.b = append(t.b[:0], name...)
	t.b = append(t.b, ' ')
	t.b = appendFloat(t.b, v)
	t.b = append(t.b, '\n')
	t.write()
}

// labelled writes name{label="value"} v, a series with one label and no
// task.
func (t *textWriter) labelled(name, label, value string, v float64) {
	t.b = append(t.b[:0], name...)
	t.b = append(t.b, '{')
	t.b = t.label(label, value)
	t.b = append(t.b, "} "...)
	t.b = appendFloat(t.b, v)
	t.b = append(t.b, '\n')
	t.write()
}

// sample writes name{label="value",task="task"} v, or name{task="task"} v
// without a label, with the labels in client_golang's order: sorted by
// name, but le last.
func (t *textWriter) sample(name, task, label, value string, v float64) {
	t.b = append(t.b[:0], name...)
	t.b = append(t.b, '{')
	if label != "" && label != "le" {
		t.b = t.label(label, value)
		t.b = append(t.b, ',')
	}
	t.b = t.label("task", task)
	if label == "le" {
		t.b = append(t.b, ',')
		t.b = t.label(label, value)
	}
	t.b = append(t.b, "} "...)
	t.b = appendFloat(t.b, v)
	t.b = append(t.b, '\n')
	t.write()
}

// label appends name="value" to the line.
func (t *textWriter) label(name, value string) []byte {
	t.b = append(t.b, name...)
	t.b = append(t.b, `="`...)
	t.b = appendLabelValue(t.b, value)
	return append(t.b, '"')
}

func (t *textWriter) write() {
	if t.err == nil {
		_, t.err = t.w.Write(t.b)
	}
}

func (t *textWriter) flush() error {
	if t.err != nil {
		return t.err
	}
	return t.w.Flush()
}

// appendLabelValue appends v escaped as the text format wants a label
// value: backslash, double quote and line feed.
func appendLabelValue(b []byte, v string) []byte {
	for i := 0; i < len(v); i++ {
		switch c := v[i]; c {
		case '\\':
			b = append(b, `\\`...)
		case '"':
			b = append(b, `\"`...)
		case '\n':
			b = append(b, `\n`...)
		default:
			b = append(b, c)
		}
	}
	return b
}

// appendFloat appends v formatted as client_golang's text encoder does.
func appendFloat(b []byte, v float64) []byte {
	switch {
	case math.IsNaN(v):
		return append(b, "NaN"...)
	case math.IsInf(v, +1):
		return append(b, "+Inf"...)
	case math.IsInf(v, -1):
		return append(b, "-Inf"...)
	}
	return strconv.AppendFloat(b, v, 'g', -1, 64)
}
