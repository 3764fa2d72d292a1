package scheduler

import (
	"bufio"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"
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
// WriteMetrics writes out at scrape time. A *Vec child
// costs about 11 KB a task in label pairs, metric objects and histogram
// halves (issue #5's heap profile: 110 of 144 MB with 10,000 tasks); a
// taskStats costs a few hundred bytes. The tasks are the config's, fixed
// for the scheduler's life, so the index is built once and never locked.
type metrics struct {
	tasks     []*taskStats          // in config order
	byName    map[string]*taskStats // the same, by task name
	created   time.Time             // the counters' and histograms' created timestamp (TaskCollector's)
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

// newMetrics builds the series of tasks and registers the scheduler's own
// (not per-task) series with reg; WriteMetrics and TaskCollector give the
// per-task ones.
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
	reg.MustRegister(m.redisUp, m.clockSkew)
	return m
}

// The per-task families, as WriteMetrics writes them.
const (
	helpClaims       = "Slot claims by result: won, held, done, exhausted, early, late, error."
	helpRuns         = "Task attempts run on this replica by outcome: success, failure, timeout, lease_lost, canceled."
	helpDuration     = "How long task attempts ran."
	helpStartDelay   = "How long after its slot time an attempt started."
	helpRenewals     = "Lease renewals confirmed by the store."
	helpLeaseLosses  = "Leases lost while a task ran (the task was cancelled)."
	helpExhausted    = "Slots whose last allowed attempt failed on this replica."
	helpMissed       = "Slots this replica saw close without a success and without exhausting their attempts."
	helpLastSuccess  = "Slot time of the task's latest slot completed by this replica, in Unix seconds."
	helpRunning      = "Task attempts running on this replica."
	helpFinishErrors = "Completions or releases that failed; the slot's lease then runs out on its own."
	helpWindow       = "The task's slot window (deadline, or the longest gap between fire times): alerts scale with it."
)

// WriteMetrics writes every task's series to w in the Prometheus text
// format (version 0.0.4), family by family, straight from the counters:
// the registry holds only the scheduler's other series. Through
// client_golang's registry a scrape built an object per series first,
// about 17 KB a task; with 10,000 tasks every scrape allocated 170 MB and
// kept most of it live until it was encoded, which took a replica's RSS
// from about 110 MB to 260-290 MB when scraped every few seconds. Here a
// scrape allocates a buffer.
func (s *Scheduler) WriteMetrics(w io.Writer) error { return s.m.writeText(w) }

func (m *metrics) writeText(w io.Writer) error {
	t := textWriter{w: bufio.NewWriterSize(w, 64<<10)}
	counters := func(name, help string, v func(*taskStats) *counter) {
		t.header(name, help, "counter")
		for _, st := range m.tasks {
			t.sample(name, st.name, "", "", float64(v(st).Load()))
		}
	}
	gauges := func(name, help string, v func(*taskStats) (float64, bool)) {
		t.header(name, help, "gauge")
		for _, st := range m.tasks {
			if x, ok := v(st); ok {
				t.sample(name, st.name, "", "", x)
			}
		}
	}
	histograms := func(name, help string, h func(*taskStats) *histogram) {
		t.header(name, help, "histogram")
		bucket, sum, count := name+"_bucket", name+"_sum", name+"_count"
		var les [buckets]string
		for _, st := range m.tasks {
			h := h(st)
			if les[0] == "" {
				for i, le := range h.upper {
					les[i] = string(appendFloat(nil, le))
				}
			}
			var n uint64
			for i := range h.upper {
				n += h.counts[i].Load()
				t.sample(bucket, st.name, "le", les[i], float64(n))
			}
			n += h.counts[buckets].Load()
			t.sample(bucket, st.name, "le", "+Inf", float64(n))
			t.sample(sum, st.name, "", "", math.Float64frombits(h.sum.Load()))
			t.sample(count, st.name, "", "", float64(n))
		}
	}

	t.header("slotd_claims_total", helpClaims, "counter")
	for _, st := range m.tasks {
		for r := range st.claims {
			result := resultError
			if r > 0 {
				result = lock.Result(r).String()
			}
			t.sample("slotd_claims_total", st.name, "result", result, float64(st.claims[r].Load()))
		}
	}
	t.header("slotd_runs_total", helpRuns, "counter")
	for _, st := range m.tasks {
		for i, o := range outcomes {
			t.sample("slotd_runs_total", st.name, "outcome", o, float64(st.runs[i].Load()))
		}
	}
	histograms("slotd_task_duration_seconds", helpDuration, func(st *taskStats) *histogram { return &st.duration })
	histograms("slotd_start_delay_seconds", helpStartDelay, func(st *taskStats) *histogram { return &st.startDelay })
	counters("slotd_lease_renewals_total", helpRenewals, func(st *taskStats) *counter { return &st.renewals })
	counters("slotd_lease_losses_total", helpLeaseLosses, func(st *taskStats) *counter { return &st.leaseLosses })
	counters("slotd_slots_exhausted_total", helpExhausted, func(st *taskStats) *counter { return &st.exhausted })
	counters("slotd_slots_missed_total", helpMissed, func(st *taskStats) *counter { return &st.missed })
	counters("slotd_finish_errors_total", helpFinishErrors, func(st *taskStats) *counter { return &st.finishErrors })
	gauges("slotd_last_success_timestamp_seconds", helpLastSuccess, func(st *taskStats) (float64, bool) {
		sec := st.lastSuccess.Load()
		return float64(sec), sec != noSuccess
	})
	gauges("slotd_running_tasks", helpRunning, func(st *taskStats) (float64, bool) { return float64(st.running.Load()), true })
	gauges("slotd_task_window_seconds", helpWindow, func(st *taskStats) (float64, bool) { return st.window, true })
	return t.flush()
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
		claims:       desc("slotd_claims_total", helpClaims, "result"),
		runs:         desc("slotd_runs_total", helpRuns, "outcome"),
		duration:     desc("slotd_task_duration_seconds", helpDuration),
		startDelay:   desc("slotd_start_delay_seconds", helpStartDelay),
		renewals:     desc("slotd_lease_renewals_total", helpRenewals),
		leaseLosses:  desc("slotd_lease_losses_total", helpLeaseLosses),
		exhausted:    desc("slotd_slots_exhausted_total", helpExhausted),
		missed:       desc("slotd_slots_missed_total", helpMissed),
		lastSuccess:  desc("slotd_last_success_timestamp_seconds", helpLastSuccess),
		running:      desc("slotd_running_tasks", helpRunning),
		finishErrors: desc("slotd_finish_errors_total", helpFinishErrors),
		window:       desc("slotd_task_window_seconds", helpWindow),
	}
}

// TaskCollector returns a collector of every task's series, for a
// registry of the caller's own (WithRegisterer registers only the
// scheduler's other series). It is the same series WriteMetrics writes,
// at client_golang's cost: an object per series at every scrape, about
// 17 KB a task. The tests read the series through it.
func (s *Scheduler) TaskCollector() prometheus.Collector {
	return &taskCollector{m: s.m, d: newTaskDescs()}
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
