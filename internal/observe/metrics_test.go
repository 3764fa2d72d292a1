package observe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/slotd/slotd/internal/stats"
	"github.com/slotd/slotd/lock"
)

// scrape is one scrape of set's series, with the store up and skew.
func scrape(t testing.TB, set *stats.Set, up bool, skew time.Duration) string {
	t.Helper()
	var b strings.Builder
	if err := writeText(&b, set, up, skew); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// Every series, driven through every path the scheduler takes, scrapes as
// the *Vec series did: same names, help, labels, buckets; a task without
// events shows its zero series and no last_success. A parser reads the
// scrape as valid; the text format orders neither families nor series, so
// the lines are compared as a set.
func TestMetricsExposition(t *testing.T) {
	set := stats.New([]stats.TaskInfo{{Name: "nightly", Window: 24 * time.Hour}, {Name: "idle", Window: 5 * time.Minute}})
	st := set.Task("nightly")
	for _, r := range []lock.Result{lock.Won, lock.Won, lock.Held, lock.Done, lock.Exhausted, lock.Early, lock.Late, lock.Result(42)} {
		st.Claimed(r)
	}
	st.ClaimFailed()
	for _, o := range []stats.Outcome{stats.OutcomeSuccess, stats.OutcomeSuccess, stats.OutcomeFailure, stats.OutcomeTimeout, stats.OutcomeLeaseLost, stats.OutcomeCanceled, "bogus"} {
		st.Ran(o)
	}
	// Powers of two, so that the sums print exactly.
	for _, v := range []float64{0.0078125, 0.03125, 128, 65536} {
		st.Duration.Observe(v)
	}
	for _, v := range []float64{0.0009765625, 0.5, 0.5, 1024} {
		st.StartDelay.Observe(v)
	}
	for range 3 {
		st.Renewals.Inc()
	}
	st.LeaseLosses.Inc()
	st.Exhausted.Inc()
	st.Missed.Inc()
	set.Notifications.Add(stats.NotifyFailure)
	set.Notifications.Add(stats.NotifySuccess)
	set.Notifications.Add(stats.NotifySuccess)
	st.Missed.Inc()
	st.FinishErrors.Inc()
	st.Ran(stats.OutcomeSuperseded)
	st.Paused.Store(true)
	st.Skip(stats.SkipPaused)
	st.Skip(stats.SkipPaused)
	st.Skip(stats.SkipForbid)
	st.Skip("bogus") // no such reason: not counted
	st.MissedCapacity.Inc()
	st.MissedBackoff.Inc()
	st.MissedQueue.Inc()
	st.Backfilled.Add(5)
	st.BackfillLeft.Store(2)
	set.Capacity.Max.Store(8)
	set.Capacity.Running.Store(8)
	set.Capacity.Waiting.Store(3)
	set.Store.Wrote("claim", &lock.StoreError{Kind: lock.KindOOM, Store: "redis", Code: "OOM",
		Err: errors.New("OOM command not allowed when used memory > 'maxmemory'.")}, time.Unix(0, 0))
	set.Store.Probed(fmt.Errorf("lock: probe: %w", &lock.StoreError{Kind: lock.KindNoPerm, Store: "redis", Code: "NOPERM",
		Err: errors.New("NOPERM this user has no permissions")}), time.Unix(0, 0))
	set.Store.Wrote("renew", context.DeadlineExceeded, time.Unix(0, 0))
	set.Store.Wrote("release", lock.ErrNotHeld, time.Unix(0, 0)) // an answer, not an error of the store
	st.Running.Add(1)
	st.Running.Add(1)
	st.Running.Add(-1)
	newer := time.Date(2026, 11, 23, 3, 0, 0, 0, time.UTC)
	st.Succeeded(newer)
	st.Succeeded(newer.Add(-24 * time.Hour)) // a retry of an older slot ends later
	st.Succeeded(newer)

	// The last success is newer, 2026-11-23T03:00:00Z: 1795402800.
	want := `
# HELP slotd_claims_total Slot claims by result: won, held, done, exhausted, early, late, error.
# TYPE slotd_claims_total counter
slotd_claims_total{result="done",task="idle"} 0
slotd_claims_total{result="done",task="nightly"} 1
slotd_claims_total{result="early",task="idle"} 0
slotd_claims_total{result="early",task="nightly"} 1
slotd_claims_total{result="error",task="idle"} 0
slotd_claims_total{result="error",task="nightly"} 2
slotd_claims_total{result="exhausted",task="idle"} 0
slotd_claims_total{result="exhausted",task="nightly"} 1
slotd_claims_total{result="held",task="idle"} 0
slotd_claims_total{result="held",task="nightly"} 1
slotd_claims_total{result="late",task="idle"} 0
slotd_claims_total{result="late",task="nightly"} 1
slotd_claims_total{result="won",task="idle"} 0
slotd_claims_total{result="won",task="nightly"} 2
# HELP slotd_clock_skew_seconds Store clock minus this replica's clock, as last measured.
# TYPE slotd_clock_skew_seconds gauge
slotd_clock_skew_seconds -0.25
# HELP slotd_finish_errors_total Completions or releases that failed; the slot's lease then runs out on its own.
# TYPE slotd_finish_errors_total counter
slotd_finish_errors_total{task="idle"} 0
slotd_finish_errors_total{task="nightly"} 1
# HELP slotd_last_success_timestamp_seconds Slot time of the task's latest slot completed by this replica, in Unix seconds.
# TYPE slotd_last_success_timestamp_seconds gauge
slotd_last_success_timestamp_seconds{task="nightly"} 1.7954028e+09
# HELP slotd_lease_losses_total Leases lost while a task ran (the task was cancelled).
# TYPE slotd_lease_losses_total counter
slotd_lease_losses_total{task="idle"} 0
slotd_lease_losses_total{task="nightly"} 1
# HELP slotd_lease_renewals_total Lease renewals confirmed by the store.
# TYPE slotd_lease_renewals_total counter
slotd_lease_renewals_total{task="idle"} 0
slotd_lease_renewals_total{task="nightly"} 3
# HELP slotd_notifications_total on_failure hooks by outcome: success, failure (including a timeout; not retried), store_error (the once marker could not be set: not run), unsupported (the store has no once marker: not run), dropped (this replica already ran max_hooks hooks: not run here, left to a peer).
# TYPE slotd_notifications_total counter
slotd_notifications_total{outcome="success"} 2
slotd_notifications_total{outcome="failure"} 1
slotd_notifications_total{outcome="store_error"} 0
slotd_notifications_total{outcome="unsupported"} 0
slotd_notifications_total{outcome="dropped"} 0
# HELP slotd_redis_up 1 if the last check of the store answered, its write probe was taken, and no recent write was refused, else 0.
# TYPE slotd_redis_up gauge
slotd_redis_up 1
# HELP slotd_running_tasks Task attempts running on this replica.
# TYPE slotd_running_tasks gauge
slotd_running_tasks{task="idle"} 0
slotd_running_tasks{task="nightly"} 1
# HELP slotd_waiting_tasks Task attempts on this replica waiting for their task's running slot to end (concurrency = "queue").
# TYPE slotd_waiting_tasks gauge
slotd_waiting_tasks{task="idle"} 0
slotd_waiting_tasks{task="nightly"} 0
# HELP slotd_runs_total Task attempts run on this replica by outcome: success, failure, timeout, lease_lost, canceled, success_unmarked, superseded, record_lost.
# TYPE slotd_runs_total counter
slotd_runs_total{outcome="canceled",task="idle"} 0
slotd_runs_total{outcome="canceled",task="nightly"} 1
slotd_runs_total{outcome="failure",task="idle"} 0
slotd_runs_total{outcome="failure",task="nightly"} 2
slotd_runs_total{outcome="lease_lost",task="idle"} 0
slotd_runs_total{outcome="lease_lost",task="nightly"} 1
slotd_runs_total{outcome="success",task="idle"} 0
slotd_runs_total{outcome="success",task="nightly"} 2
slotd_runs_total{outcome="success_unmarked",task="idle"} 0
slotd_runs_total{outcome="success_unmarked",task="nightly"} 0
slotd_runs_total{outcome="timeout",task="idle"} 0
slotd_runs_total{outcome="timeout",task="nightly"} 1
# HELP slotd_slots_exhausted_total Slots whose last allowed attempt failed on this replica.
# TYPE slotd_slots_exhausted_total counter
slotd_slots_exhausted_total{task="idle"} 0
slotd_slots_exhausted_total{task="nightly"} 1
# HELP slotd_slots_missed_total Slots this replica saw close without a success and without exhausting their attempts.
# TYPE slotd_slots_missed_total counter
slotd_slots_missed_total{task="idle"} 0
slotd_slots_missed_total{task="nightly"} 2
# HELP slotd_start_delay_seconds How long after its slot time an attempt started.
# TYPE slotd_start_delay_seconds histogram
slotd_start_delay_seconds_bucket{task="idle",le="0.001"} 0
slotd_start_delay_seconds_bucket{task="idle",le="0.004"} 0
slotd_start_delay_seconds_bucket{task="idle",le="0.016"} 0
slotd_start_delay_seconds_bucket{task="idle",le="0.064"} 0
slotd_start_delay_seconds_bucket{task="idle",le="0.256"} 0
slotd_start_delay_seconds_bucket{task="idle",le="1.024"} 0
slotd_start_delay_seconds_bucket{task="idle",le="4.096"} 0
slotd_start_delay_seconds_bucket{task="idle",le="16.384"} 0
slotd_start_delay_seconds_bucket{task="idle",le="65.536"} 0
slotd_start_delay_seconds_bucket{task="idle",le="262.144"} 0
slotd_start_delay_seconds_bucket{task="idle",le="+Inf"} 0
slotd_start_delay_seconds_sum{task="idle"} 0
slotd_start_delay_seconds_count{task="idle"} 0
slotd_start_delay_seconds_bucket{task="nightly",le="0.001"} 1
slotd_start_delay_seconds_bucket{task="nightly",le="0.004"} 1
slotd_start_delay_seconds_bucket{task="nightly",le="0.016"} 1
slotd_start_delay_seconds_bucket{task="nightly",le="0.064"} 1
slotd_start_delay_seconds_bucket{task="nightly",le="0.256"} 1
slotd_start_delay_seconds_bucket{task="nightly",le="1.024"} 3
slotd_start_delay_seconds_bucket{task="nightly",le="4.096"} 3
slotd_start_delay_seconds_bucket{task="nightly",le="16.384"} 3
slotd_start_delay_seconds_bucket{task="nightly",le="65.536"} 3
slotd_start_delay_seconds_bucket{task="nightly",le="262.144"} 3
slotd_start_delay_seconds_bucket{task="nightly",le="+Inf"} 4
slotd_start_delay_seconds_sum{task="nightly"} 1025.0009765625
slotd_start_delay_seconds_count{task="nightly"} 4
# HELP slotd_store_errors_total Errors of the store's calls (claims, renewals, completions, releases, write probes) by kind: oom, noperm, readonly, misconf, noreplicas, noscript, auth, unavailable, timeout, conn, other.
# TYPE slotd_store_errors_total counter
slotd_store_errors_total{kind="oom"} 1
slotd_store_errors_total{kind="noperm"} 1
slotd_store_errors_total{kind="readonly"} 0
slotd_store_errors_total{kind="misconf"} 0
slotd_store_errors_total{kind="noreplicas"} 0
slotd_store_errors_total{kind="noscript"} 0
slotd_store_errors_total{kind="auth"} 0
slotd_store_errors_total{kind="unavailable"} 0
slotd_store_errors_total{kind="timeout"} 1
slotd_store_errors_total{kind="conn"} 0
slotd_store_errors_total{kind="other"} 0
# HELP slotd_task_duration_seconds How long task attempts ran.
# TYPE slotd_task_duration_seconds histogram
slotd_task_duration_seconds_bucket{task="idle",le="0.01"} 0
slotd_task_duration_seconds_bucket{task="idle",le="0.04"} 0
slotd_task_duration_seconds_bucket{task="idle",le="0.16"} 0
slotd_task_duration_seconds_bucket{task="idle",le="0.64"} 0
slotd_task_duration_seconds_bucket{task="idle",le="2.56"} 0
slotd_task_duration_seconds_bucket{task="idle",le="10.24"} 0
slotd_task_duration_seconds_bucket{task="idle",le="40.96"} 0
slotd_task_duration_seconds_bucket{task="idle",le="163.84"} 0
slotd_task_duration_seconds_bucket{task="idle",le="655.36"} 0
slotd_task_duration_seconds_bucket{task="idle",le="2621.44"} 0
slotd_task_duration_seconds_bucket{task="idle",le="+Inf"} 0
slotd_task_duration_seconds_sum{task="idle"} 0
slotd_task_duration_seconds_count{task="idle"} 0
slotd_task_duration_seconds_bucket{task="nightly",le="0.01"} 1
slotd_task_duration_seconds_bucket{task="nightly",le="0.04"} 2
slotd_task_duration_seconds_bucket{task="nightly",le="0.16"} 2
slotd_task_duration_seconds_bucket{task="nightly",le="0.64"} 2
slotd_task_duration_seconds_bucket{task="nightly",le="2.56"} 2
slotd_task_duration_seconds_bucket{task="nightly",le="10.24"} 2
slotd_task_duration_seconds_bucket{task="nightly",le="40.96"} 2
slotd_task_duration_seconds_bucket{task="nightly",le="163.84"} 3
slotd_task_duration_seconds_bucket{task="nightly",le="655.36"} 3
slotd_task_duration_seconds_bucket{task="nightly",le="2621.44"} 3
slotd_task_duration_seconds_bucket{task="nightly",le="+Inf"} 4
slotd_task_duration_seconds_sum{task="nightly"} 65664.0390625
slotd_task_duration_seconds_count{task="nightly"} 4
# HELP slotd_task_window_seconds The task's slot window (deadline, or the longest gap between fire times): alerts scale with it.
# TYPE slotd_task_window_seconds gauge
slotd_task_window_seconds{task="idle"} 300
slotd_task_window_seconds{task="nightly"} 86400
slotd_runs_total{outcome="superseded",task="nightly"} 1
slotd_runs_total{outcome="superseded",task="idle"} 0
slotd_runs_total{outcome="record_lost",task="nightly"} 0
slotd_runs_total{outcome="record_lost",task="idle"} 0
# HELP slotd_task_paused 1 if the task is paused (slotd pause, or paused = true), as this replica last heard, else 0: its slots are skipped, not missed.
# TYPE slotd_task_paused gauge
slotd_task_paused{task="nightly"} 1
slotd_task_paused{task="idle"} 0
# HELP slotd_slots_skipped_total Slots not run, by reason: paused (the task was paused when the slot fired, counted on each replica), forbid (the previous slot still ran; concurrency = "forbid"), queue_full (another slot of the task already waited; concurrency = "queue").
# TYPE slotd_slots_skipped_total counter
slotd_slots_skipped_total{reason="paused",task="nightly"} 2
slotd_slots_skipped_total{reason="forbid",task="nightly"} 1
slotd_slots_skipped_total{reason="queue_full",task="nightly"} 0
slotd_slots_skipped_total{reason="paused",task="idle"} 0
slotd_slots_skipped_total{reason="forbid",task="idle"} 0
slotd_slots_skipped_total{reason="queue_full",task="idle"} 0
# HELP slotd_running_attempts Task attempts running on this replica, all tasks together: what [daemon] max_running caps.
# TYPE slotd_running_attempts gauge
slotd_running_attempts 8
# HELP slotd_max_running This replica's [daemon] max_running; 0: no cap.
# TYPE slotd_max_running gauge
slotd_max_running 8
# HELP slotd_capacity_waiting_slots Slots this replica waits to claim because it is at max_running (peers may take them meanwhile).
# TYPE slotd_capacity_waiting_slots gauge
slotd_capacity_waiting_slots 3
# HELP slotd_slots_missed_capacity_total Of slotd_slots_missed_total, the slots this replica waited to claim, at max_running, until their window closed, and no peer started.
# TYPE slotd_slots_missed_capacity_total counter
slotd_slots_missed_capacity_total{task="nightly"} 1
slotd_slots_missed_capacity_total{task="idle"} 0
# HELP slotd_slots_missed_backoff_total Of slotd_slots_missed_total, the slots whose retry_backoff after a failed attempt ended at or after their deadline.
# TYPE slotd_slots_missed_backoff_total counter
slotd_slots_missed_backoff_total{task="nightly"} 1
slotd_slots_missed_backoff_total{task="idle"} 0
# HELP slotd_slots_missed_queue_total Of slotd_slots_missed_total, the slots whose window closed while they waited for their task's running slot (concurrency = "queue"); counted once for the fleet, by the waiter's replica.
# TYPE slotd_slots_missed_queue_total counter
slotd_slots_missed_queue_total{task="nightly"} 1
slotd_slots_missed_queue_total{task="idle"} 0
# HELP slotd_slots_backfilled_total Slots of a past range that an operator's backfill started on this replica (each is claimed as a fired slot; a slot already done is not run again).
# TYPE slotd_slots_backfilled_total counter
slotd_slots_backfilled_total{task="nightly"} 5
slotd_slots_backfilled_total{task="idle"} 0
# HELP slotd_backfill_slots_pending Slots of the operators' backfills under way on this replica that have not ended yet (queued or started).
# TYPE slotd_backfill_slots_pending gauge
slotd_backfill_slots_pending{task="nightly"} 2
slotd_backfill_slots_pending{task="idle"} 0
`
	want = strings.TrimPrefix(want, "\n")
	got := scrape(t, set, true, -250*time.Millisecond)
	if _, err := parseText(got); err != nil {
		t.Fatalf("the scrape does not parse: %v\n%s", err, got)
	}
	if d := lineDiff(got, want); d != "" {
		t.Errorf("the scrape differs from the *Vec series' exposition:\n%s", d)
	}
}

// A task name is escaped as a label value: a backslash, a double quote and
// a line feed would otherwise end the value or the line.
func TestWriteMetricsEscapesTaskNames(t *testing.T) {
	name := "a\\b\"c\nd"
	got := scrape(t, stats.New([]stats.TaskInfo{{Name: name, Window: time.Second}}), false, 0)
	mfs, err := parseText(got)
	if err != nil {
		t.Fatalf("does not parse: %v\n%s", err, got)
	}
	if v := mfs["slotd_running_tasks"].GetMetric()[0].GetLabel()[0].GetValue(); v != name {
		t.Errorf("task label %q, want %q", v, name)
	}
	if up := mfs["slotd_redis_up"].GetMetric()[0].GetGauge().GetValue(); up != 0 {
		t.Errorf("slotd_redis_up %v with the store down, want 0", up)
	}
}

// parseText parses a scrape in the text format, as Prometheus would.
func parseText(s string) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.LegacyValidation)
	return p.TextToMetricFamilies(strings.NewReader(s))
}

// lineDiff lists the lines only in got (+) and only in want (-).
func lineDiff(got, want string) string {
	count := map[string]int{}
	for _, l := range strings.Split(want, "\n") {
		count[l]++
	}
	var b strings.Builder
	for _, l := range strings.Split(got, "\n") {
		if count[l] > 0 {
			count[l]--
		} else {
			fmt.Fprintf(&b, "+ %s\n", l)
		}
	}
	for _, l := range strings.Split(want, "\n") {
		if count[l] > 0 {
			count[l]--
			fmt.Fprintf(&b, "- %s\n", l)
		}
	}
	return b.String()
}

// Events racing scrapes lose nothing, and every scrape is self-consistent:
// the count is the +Inf bucket, read through a parser.
func TestMetricsConcurrentScrape(t *testing.T) {
	set := stats.New([]stats.TaskInfo{{Name: "busy", Window: time.Second}})
	st := set.Task("busy")
	const workers, each = 4, 2000
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range each {
				st.Claimed(lock.Won)
				st.Duration.Observe(0.5)
				st.Running.Add(1)
				st.Running.Add(-1)
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	scrapes := 0
	for finished := false; !finished; scrapes++ {
		select {
		case <-done:
			finished = true
		default:
		}
		mfs, err := parseText(scrape(t, set, true, 0))
		if err != nil {
			t.Fatal(err)
		}
		h := mfs["slotd_task_duration_seconds"].GetMetric()[0].GetHistogram()
		if last := h.GetBucket()[len(h.GetBucket())-1]; h.GetSampleCount() < last.GetCumulativeCount() {
			t.Fatalf("count %d below the last finite bucket's %d", h.GetSampleCount(), last.GetCumulativeCount())
		}
		if finished && (h.GetSampleCount() != workers*each || h.GetSampleSum() != workers*each*0.5) {
			t.Fatalf("after the workers: count %d, sum %v; want %d, %v", h.GetSampleCount(), h.GetSampleSum(), workers*each, workers*each*0.5)
		}
	}
	if n := st.Claims[lock.Won].Load(); n != workers*each {
		t.Errorf("won claims = %d, want %d", n, workers*each)
	}
	if n := st.Running.Load(); n != 0 {
		t.Errorf("running = %d, want 0", n)
	}
	t.Logf("%d scrapes raced the events", scrapes)
}

// vecSeries builds, for names, the *Vec series the scheduler kept before
// taskStats (one child per series, created at start as init did), so that
// the heap test can measure both in one run.
func vecSeries(reg prometheus.Registerer, names []string) {
	counter := func(name string, labels ...string) *prometheus.CounterVec {
		v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: name}, append([]string{"task"}, labels...))
		reg.MustRegister(v)
		return v
	}
	hist := func(name string, start float64) *prometheus.HistogramVec {
		v := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: name, Buckets: prometheus.ExponentialBuckets(start, 4, stats.Buckets)}, []string{"task"})
		reg.MustRegister(v)
		return v
	}
	gauge := func(name string) *prometheus.GaugeVec {
		v := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: name}, []string{"task"})
		reg.MustRegister(v)
		return v
	}
	claims, runs := counter("claims", "result"), counter("runs", "outcome")
	hists := []*prometheus.HistogramVec{hist("duration", 0.01), hist("delay", 0.001)}
	plain := []*prometheus.CounterVec{counter("renewals"), counter("losses"), counter("exhausted"), counter("missed"), counter("finish")}
	running, window := gauge("running"), gauge("window")
	for _, n := range names {
		for r := lock.Won; r <= lock.Late; r++ {
			claims.WithLabelValues(n, r.String())
		}
		claims.WithLabelValues(n, stats.ResultError)
		for _, o := range stats.Outcomes {
			runs.WithLabelValues(n, string(o))
		}
		for _, h := range hists {
			h.WithLabelValues(n)
		}
		for _, c := range plain {
			c.WithLabelValues(n)
		}
		running.WithLabelValues(n)
		window.WithLabelValues(n).Set(60)
	}
}

// heapGrowth is the live heap that build adds, in bytes, and the bytes the
// scrape it returns allocates.
func heapGrowth(build func(prometheus.Registerer) (scrape func() error)) (live, scraped uint64) {
	var before, after, done runtime.MemStats
	reg := prometheus.NewRegistry()
	runtime.GC()
	runtime.ReadMemStats(&before)
	scrape := build(reg)
	runtime.GC()
	runtime.ReadMemStats(&after)
	if err := scrape(); err != nil {
		panic(err)
	}
	runtime.ReadMemStats(&done)
	runtime.KeepAlive(reg)
	return after.HeapAlloc - min(before.HeapAlloc, after.HeapAlloc), done.TotalAlloc - after.TotalAlloc
}

// The live heap of 10,000 tasks' series, against the *Vec series measured
// in the same run: issue #5's target needs it to shrink by an order of
// magnitude. Measured, not timed; the ratio is what is checked.
func TestMetricsHeapPerTask(t *testing.T) {
	if testing.Short() {
		t.Skip("builds 10,000 tasks' series twice")
	}
	const n = 10_000
	infos := make([]stats.TaskInfo, n)
	names := make([]string, n)
	for i := range infos {
		names[i] = fmt.Sprintf("task-%05d", i)
		infos[i] = stats.TaskInfo{Name: names[i], Window: 10 * time.Second}
	}
	gather := func(reg prometheus.Registerer) func() error {
		return func() error { _, err := reg.(prometheus.Gatherer).Gather(); return err }
	}
	newLive, newScrape := heapGrowth(func(reg prometheus.Registerer) func() error {
		set := stats.New(infos)
		return func() error { return writeText(io.Discard, set, true, 0) }
	})
	oldLive, oldScrape := heapGrowth(func(reg prometheus.Registerer) func() error {
		vecSeries(reg, names)
		return gather(reg)
	})
	t.Logf("live heap per task: %d B (atomics) vs %d B (*Vec series), ratio %.3f",
		newLive/n, oldLive/n, float64(newLive)/float64(oldLive))
	t.Logf("allocated per task by one scrape: %d B (writeText), %d B (*Vec series)", newScrape/n, oldScrape/n)
	if newLive*10 > oldLive {
		t.Errorf("live heap per task %d B is more than a tenth of the *Vec series' %d B", newLive/n, oldLive/n)
	}
	if newScrape > 64<<10+n*16 {
		t.Errorf("a scrape of %d tasks allocated %d B, want about one 64 KB buffer", n, newScrape)
	}
}
