package scheduler

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slotd/slotd/lock"
)

// metrics are the scheduler's Prometheus series. Labels are bounded: task
// names come from the config, results and outcomes from fixed sets; a slot id
// is never a label.
type metrics struct {
	claims        *prometheus.CounterVec   // task, result
	runs          *prometheus.CounterVec   // task, outcome
	duration      *prometheus.HistogramVec // task
	startDelay    *prometheus.HistogramVec // task
	renewals      *prometheus.CounterVec   // task
	leaseLosses   *prometheus.CounterVec   // task
	exhausted     *prometheus.CounterVec   // task
	missed        *prometheus.CounterVec   // task
	lastSuccess   *prometheus.GaugeVec     // task
	running       *prometheus.GaugeVec     // task
	redisUp       prometheus.Gauge
	clockSkew     prometheus.Gauge
	releaseFailed *prometheus.CounterVec // task
	window        *prometheus.GaugeVec   // task

	mu     sync.Mutex
	lastOK map[string]time.Time // per task: the latest slot time set in lastSuccess
}

// init creates the task's series at zero, so that a replica's first
// failure after a start is an increase Prometheus can see, and every task
// shows on dashboards before it first runs. last_success stays absent until
// a success: a zero there would read as "never succeeded" and page.
func (m *metrics) init(t *Task) {
	for r := lock.Won; r <= lock.Late; r++ {
		m.claims.WithLabelValues(t.Name, r.String())
	}
	m.claims.WithLabelValues(t.Name, resultError)
	for _, o := range []string{outcomeSuccess, outcomeFailure, outcomeTimeout, outcomeLeaseLost, outcomeCanceled} {
		m.runs.WithLabelValues(t.Name, o)
	}
	m.duration.WithLabelValues(t.Name)
	m.startDelay.WithLabelValues(t.Name)
	m.renewals.WithLabelValues(t.Name)
	m.leaseLosses.WithLabelValues(t.Name)
	m.exhausted.WithLabelValues(t.Name)
	m.missed.WithLabelValues(t.Name)
	m.running.WithLabelValues(t.Name)
	m.releaseFailed.WithLabelValues(t.Name)
	// At least one gap between fire times: alerts use twice this as "no
	// success for two windows", which a deadline shorter than the interval
	// must not turn into a page between healthy slots.
	m.window.WithLabelValues(t.Name).Set(max(t.Window(), t.Schedule.MaxGap()).Seconds())
}

// succeeded moves the task's last-success gauge forward, never back: a
// retry of an older slot that ends after a newer one must not lower it.
func (m *metrics) succeeded(task string, slot time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if slot.After(m.lastOK[task]) {
		m.lastOK[task] = slot
		m.lastSuccess.WithLabelValues(task).Set(float64(slot.Unix()))
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

func newMetrics(reg prometheus.Registerer) *metrics {
	task := []string{"task"}
	m := &metrics{
		lastOK: map[string]time.Time{},
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slotd_claims_total",
			Help: "Slot claims by result: won, held, done, exhausted, early, late, error.",
		}, []string{"task", "result"}),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slotd_runs_total",
			Help: "Task attempts run on this replica by outcome: success, failure, timeout, lease_lost, canceled.",
		}, []string{"task", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "slotd_task_duration_seconds",
			Help:    "How long task attempts ran.",
			Buckets: prometheus.ExponentialBuckets(0.01, 4, 10), // 10ms .. ~44min
		}, task),
		startDelay: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "slotd_start_delay_seconds",
			Help:    "How long after its slot time an attempt started.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10), // 1ms .. ~4min
		}, task),
		renewals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slotd_lease_renewals_total",
			Help: "Lease renewals confirmed by the store.",
		}, task),
		leaseLosses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slotd_lease_losses_total",
			Help: "Leases lost while a task ran (the task was cancelled).",
		}, task),
		exhausted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slotd_slots_exhausted_total",
			Help: "Slots whose last allowed attempt failed on this replica.",
		}, task),
		missed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slotd_slots_missed_total",
			Help: "Slots this replica saw close without a success and without exhausting their attempts.",
		}, task),
		lastSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "slotd_last_success_timestamp_seconds",
			Help: "Slot time of the task's latest slot completed by this replica, in Unix seconds.",
		}, task),
		running: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "slotd_running_tasks",
			Help: "Task attempts running on this replica.",
		}, task),
		redisUp: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "slotd_redis_up",
			Help: "1 if the last check of the store answered, else 0.",
		}),
		clockSkew: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "slotd_clock_skew_seconds",
			Help: "Store clock minus this replica's clock, as last measured.",
		}),
		releaseFailed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slotd_finish_errors_total",
			Help: "Completions or releases that failed; the slot's lease then runs out on its own.",
		}, task),
		window: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "slotd_task_window_seconds",
			Help: "The task's slot window (deadline, or the longest gap between fire times): alerts scale with it.",
		}, task),
	}
	reg.MustRegister(m.window, m.claims, m.runs, m.duration, m.startDelay, m.renewals, m.leaseLosses,
		m.exhausted, m.missed, m.lastSuccess, m.running, m.redisUp, m.clockSkew, m.releaseFailed)
	return m
}
