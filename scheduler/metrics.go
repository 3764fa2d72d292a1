package scheduler

import (
	"github.com/prometheus/client_golang/prometheus"
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
