package scheduler

import (
	"math"
	"slices"
	"sort"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slotd/slotd/lock"
)

// metrics are the scheduler's Prometheus series. Labels are bounded: task
// names come from the config, results and outcomes from fixed sets; a slot id
// is never a label.
//
// The per-task series are plain atomics in one taskStats per task, which
// taskCollector turns into constant metrics at scrape time. A *Vec child
// costs about 11 KB a task in label pairs, metric objects and histogram
// halves (issue #5's heap profile: 110 of 144 MB with 10,000 tasks); a
// taskStats costs a few hundred bytes. The tasks are the config's, fixed
// for the scheduler's life, so the index is built once and never locked.
type metrics struct {
	tasks     []*taskStats          // in config order
	byName    map[string]*taskStats // the same, by task name
	created   time.Time             // the counters' and histograms' created timestamp
	redisUp   prometheus.Gauge
	clockSkew prometheus.Gauge
}

// taskStats are one task's series.
type taskStats struct {
	name         string
	claims       [lock.Late + 1]counter // by lock.Result; index 0 is resultError
	runs         [len(outcomes)]counter // by outcomes' order
	duration     histogram
	startDelay   histogram
	renewals     counter
	leaseLosses  counter
	exhausted    counter
	missed       counter
	finishErrors counter
	running      atomic.Int64
	lastSuccess  atomic.Int64 // Unix seconds of the latest slot completed; noSuccess until one is
	window       float64      // seconds; fixed at start
}

// noSuccess marks a lastSuccess not yet set: the series is absent.
const noSuccess = math.MinInt64

// counter is a Prometheus counter's value.
type counter struct{ atomic.Uint64 }

// Inc adds one.
func (c *counter) Inc() { c.Add(1) }

// buckets is the number of finite upper bounds of both histograms.
const buckets = 10

var (
	durationBounds   = bounds(prometheus.ExponentialBuckets(0.01, 4, buckets))  // 10ms .. ~44min
	startDelayBounds = bounds(prometheus.ExponentialBuckets(0.001, 4, buckets)) // 1ms .. ~4min
)

func bounds(b []float64) *[buckets]float64 { return (*[buckets]float64)(b) }

// histogram is a Prometheus histogram's state: per-bucket (not cumulative)
// counts, the last one for values above every bound, and the sum's float64
// bits. A scrape derives the count from the buckets, so that it always
// equals the +Inf bucket; the sum may be one observation ahead or behind.
type histogram struct {
	upper  *[buckets]float64
	counts [buckets + 1]atomic.Uint64
	sum    atomic.Uint64
}

// Observe records v.
func (h *histogram) Observe(v float64) {
	h.counts[sort.SearchFloat64s(h.upper[:], v)].Add(1)
	for {
		old := h.sum.Load()
		if h.sum.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			return
		}
	}
}

// snapshot returns the count, the sum and the cumulative bucket counts by
// upper bound, as NewConstHistogram takes them.
func (h *histogram) snapshot() (uint64, float64, map[float64]uint64) {
	cum := make(map[float64]uint64, buckets)
	var n uint64
	for i, le := range h.upper {
		n += h.counts[i].Load()
		cum[le] = n
	}
	n += h.counts[buckets].Load()
	return n, math.Float64frombits(h.sum.Load()), cum
}

// task returns the series of the named task. Every caller names one of the
// config's tasks, which newMetrics indexed: nil for another name.
func (m *metrics) task(name string) *taskStats { return m.byName[name] }

// claimed counts a claim answered with r. A result outside lock's set
// counts as an error: the answer was not understood.
func (st *taskStats) claimed(r lock.Result) {
	if r < lock.Won || r > lock.Late {
		r = 0
	}
	st.claims[r].Inc()
}

// claimFailed counts a claim that got no answer.
func (st *taskStats) claimFailed() { st.claims[0].Inc() }

// ran counts an attempt that ended with outcome, one of outcomes.
func (st *taskStats) ran(outcome string) {
	i := slices.Index(outcomes[:], outcome)
	if i < 0 {
		i = slices.Index(outcomes[:], outcomeFailure)
	}
	st.runs[i].Inc()
}

// succeeded moves the task's last-success gauge forward, never back: a
// retry of an older slot that ends after a newer one must not lower it.
func (st *taskStats) succeeded(slot time.Time) {
	sec := slot.Unix()
	for {
		old := st.lastSuccess.Load()
		if sec <= old || st.lastSuccess.CompareAndSwap(old, sec) {
			return
		}
	}
}

// Claim results beyond lock.Result's: the claim failed.
const resultError = "error"

// Run outcomes.
const (
	outcomeSuccess   = "success"
	outcomeFailure   = "failure"
	outcomeTimeout   = "timeout"
	outcomeLeaseLost = "lease_lost"
	outcomeCanceled  = "canceled"
)

// outcomes are the run outcomes in taskStats.runs' order.
var outcomes = [...]string{outcomeSuccess, outcomeFailure, outcomeTimeout, outcomeLeaseLost, outcomeCanceled}

// newMetrics builds the series of tasks and registers them with reg.
//
// Every task's series exist at zero from the start, so that a replica's
// first failure after a start is an increase Prometheus can see, and every
// task shows on dashboards before it first runs. last_success stays absent
// until a success: a zero there would read as "never succeeded" and page.
func newMetrics(reg prometheus.Registerer, tasks []Task) *metrics {
	m := &metrics{
		tasks:   make([]*taskStats, 0, len(tasks)),
		byName:  make(map[string]*taskStats, len(tasks)),
		created: time.Now(),
		redisUp: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "slotd_redis_up",
			Help: "1 if the last check of the store answered, else 0.",
		}),
		clockSkew: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "slotd_clock_skew_seconds",
			Help: "Store clock minus this replica's clock, as last measured.",
		}),
	}
	for i := range tasks {
		t := &tasks[i]
		if m.byName[t.Name] != nil {
			continue // one task's series, as a *Vec would have shared them
		}
		st := &taskStats{
			name: t.Name,
			// At least one gap between fire times: alerts use twice this as
			// "no success for two windows", which a deadline shorter than the
			// interval must not turn into a page between healthy slots.
			window:     max(t.Window(), t.Schedule.MaxGap()).Seconds(),
			duration:   histogram{upper: durationBounds},
			startDelay: histogram{upper: startDelayBounds},
		}
		st.lastSuccess.Store(noSuccess)
		m.tasks = append(m.tasks, st)
		m.byName[t.Name] = st
	}
	reg.MustRegister(&taskCollector{m: m, d: newTaskDescs()}, m.redisUp, m.clockSkew)
	return m
}

// taskDescs are the per-task metric families.
type taskDescs struct {
	claims, runs, duration, startDelay, renewals, leaseLosses, exhausted,
	missed, lastSuccess, running, finishErrors, window *prometheus.Desc
}

func newTaskDescs() taskDescs {
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, append([]string{"task"}, labels...), nil)
	}
	return taskDescs{
		claims:       desc("slotd_claims_total", "Slot claims by result: won, held, done, exhausted, early, late, error.", "result"),
		runs:         desc("slotd_runs_total", "Task attempts run on this replica by outcome: success, failure, timeout, lease_lost, canceled.", "outcome"),
		duration:     desc("slotd_task_duration_seconds", "How long task attempts ran."),
		startDelay:   desc("slotd_start_delay_seconds", "How long after its slot time an attempt started."),
		renewals:     desc("slotd_lease_renewals_total", "Lease renewals confirmed by the store."),
		leaseLosses:  desc("slotd_lease_losses_total", "Leases lost while a task ran (the task was cancelled)."),
		exhausted:    desc("slotd_slots_exhausted_total", "Slots whose last allowed attempt failed on this replica."),
		missed:       desc("slotd_slots_missed_total", "Slots this replica saw close without a success and without exhausting their attempts."),
		lastSuccess:  desc("slotd_last_success_timestamp_seconds", "Slot time of the task's latest slot completed by this replica, in Unix seconds."),
		running:      desc("slotd_running_tasks", "Task attempts running on this replica."),
		finishErrors: desc("slotd_finish_errors_total", "Completions or releases that failed; the slot's lease then runs out on its own."),
		window:       desc("slotd_task_window_seconds", "The task's slot window (deadline, or the longest gap between fire times): alerts scale with it."),
	}
}

// taskCollector emits every task's series from its taskStats.
type taskCollector struct {
	m *metrics
	d taskDescs
}

func (c *taskCollector) Describe(ch chan<- *prometheus.Desc) {
	d := &c.d
	for _, x := range []*prometheus.Desc{d.claims, d.runs, d.duration, d.startDelay, d.renewals, d.leaseLosses,
		d.exhausted, d.missed, d.lastSuccess, d.running, d.finishErrors, d.window} {
		ch <- x
	}
}

func (c *taskCollector) Collect(ch chan<- prometheus.Metric) {
	d, ct := &c.d, c.m.created
	count := func(desc *prometheus.Desc, v *counter, labels ...string) {
		ch <- prometheus.MustNewConstMetricWithCreatedTimestamp(desc, prometheus.CounterValue, float64(v.Load()), ct, labels...)
	}
	hist := func(desc *prometheus.Desc, h *histogram, task string) {
		n, sum, cum := h.snapshot()
		ch <- prometheus.MustNewConstHistogramWithCreatedTimestamp(desc, n, sum, cum, ct, task)
	}
	for _, st := range c.m.tasks {
		for r := range st.claims {
			name := resultError
			if r > 0 {
				name = lock.Result(r).String()
			}
			count(d.claims, &st.claims[r], st.name, name)
		}
		for i, o := range outcomes {
			count(d.runs, &st.runs[i], st.name, o)
		}
		hist(d.duration, &st.duration, st.name)
		hist(d.startDelay, &st.startDelay, st.name)
		count(d.renewals, &st.renewals, st.name)
		count(d.leaseLosses, &st.leaseLosses, st.name)
		count(d.exhausted, &st.exhausted, st.name)
		count(d.missed, &st.missed, st.name)
		count(d.finishErrors, &st.finishErrors, st.name)
		if sec := st.lastSuccess.Load(); sec != noSuccess {
			ch <- prometheus.MustNewConstMetric(d.lastSuccess, prometheus.GaugeValue, float64(sec), st.name)
		}
		ch <- prometheus.MustNewConstMetric(d.running, prometheus.GaugeValue, float64(st.running.Load()), st.name)
		ch <- prometheus.MustNewConstMetric(d.window, prometheus.GaugeValue, st.window, st.name)
	}
}
