// Package stats holds the engine's per-task counters: plain atomics that
// the scheduler adds to as slots are claimed and attempts run, and that
// package observe reads at scrape time and writes out as metrics. It
// knows nothing of any exposition format.
//
// Guarantees: every method is safe for concurrent use; a Set's list of
// tasks is replaced whole (Update, on a reload), never changed in place,
// so reading it takes no lock, and a task kept across an update keeps its
// counters; a histogram's
// count, summed from its buckets, always equals its +Inf bucket (its sum
// may be one observation ahead or behind).
//
// The counters are atomics in one Task per task rather than a registry's
// labelled children: a *Vec child costs about 11 KB a task in label
// pairs, metric objects and histogram halves (issue #5's heap profile: 110
// of 144 MB with 10,000 tasks); a Task costs a few hundred bytes.
package stats

import (
	"maps"
	"math"
	"slices"
	"sort"
	"sync/atomic"
	"time"

	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/scheduler/history"
)

// Outcome is how an attempt ended, by the name the run history and the
// metrics give it: the history's own type (it travels in every entry),
// whose names slotd writes are these.
type Outcome = history.Outcome

// Outcomes of an attempt.
const (
	OutcomeSuccess   Outcome = "success"
	OutcomeFailure   Outcome = "failure"
	OutcomeTimeout   Outcome = "timeout"
	OutcomeLeaseLost Outcome = "lease_lost"
	OutcomeCanceled  Outcome = "canceled"
	// OutcomeSuccessUnmarked: the task succeeded, but its lease was lost
	// (or the daemon stopped) before the slot could be marked done, so a
	// peer may run the slot again with a higher fencing token.
	OutcomeSuccessUnmarked Outcome = "success_unmarked"
	// OutcomeSuperseded: the attempt was cancelled because a newer slot of
	// its task replaced it (concurrency = "replace"); its slot is marked
	// done.
	OutcomeSuperseded Outcome = "superseded"
	// OutcomeRecordLost: the attempt was cancelled because the renewal of
	// its task's running record (concurrency = "forbid", "replace",
	// "queue") was not confirmed within the lease, although its slot's
	// was: another slot of the task may start once the record runs out.
	// Its slot is released for a retry.
	OutcomeRecordLost Outcome = "record_lost"
	// OutcomeSkippedForbid is the history's record of a slot won but not
	// run because the previous slot of its task was still running
	// (concurrency = "forbid"); its slot is marked done. It is no run:
	// Task.Skipped counts it.
	OutcomeSkippedForbid Outcome = "skipped_forbid"
	// OutcomeSkippedQueue is the history's record of a slot won but not
	// run under concurrency = "queue" because another slot of its task
	// already waited (reason queue_full: Temporal's BufferOne drops it).
	// Its slot is marked done; Task.Skipped counts it.
	OutcomeSkippedQueue Outcome = "skipped_queue"
	// OutcomeMissedQueue is the history's record of a slot that waited
	// under concurrency = "queue" for its task's running slot until its own
	// window closed: the policy meant it to run and it could not start in
	// time, so it is missed (reason queue), not skipped. Its slot is marked
	// done, so that no peer claims it again; Task.MissedQueue counts it.
	OutcomeMissedQueue Outcome = "missed_queue"
)

// Outcomes lists the outcomes in the order of Task.Runs.
var Outcomes = [...]Outcome{OutcomeSuccess, OutcomeFailure, OutcomeTimeout, OutcomeLeaseLost, OutcomeCanceled, OutcomeSuccessUnmarked, OutcomeSuperseded, OutcomeRecordLost}

// Reasons a slot is skipped, in the order of Task.Skipped.
const (
	SkipPaused = "paused" // the task was paused when the slot fired (on this replica)
	SkipForbid = "forbid" // the previous slot still ran (concurrency = "forbid")
	// SkipQueueFull: another slot of the task already waited (concurrency = "queue").
	SkipQueueFull = "queue_full"
)

// SkipReasons lists the reasons in the order of Task.Skipped.
var SkipReasons = [...]string{SkipPaused, SkipForbid, SkipQueueFull}

// ResultError names, beside lock.Result's names, a claim that got no
// answer (or one that was not understood): Task.Claims[0].
const ResultError = "error"

// Buckets is the number of finite upper bounds of every histogram.
const Buckets = 10

// Upper bounds of the histograms, in seconds.
var (
	DurationBounds   = exponential(0.01, 4)  // attempt durations: 10ms .. ~44min
	StartDelayBounds = exponential(0.001, 4) // start delays: 1ms .. ~4min
)

func exponential(start, factor float64) *[Buckets]float64 {
	var b [Buckets]float64
	for i := range b {
		b[i] = start
		start *= factor
	}
	return &b
}

// Counter is a monotonically growing count.
type Counter struct{ atomic.Uint64 }

// Inc adds one.
func (c *Counter) Inc() { c.Add(1) }

// Histogram counts observations in buckets by upper bound, as a Prometheus
// histogram does (a value on a bound falls in that bound's bucket).
type Histogram struct {
	upper  *[Buckets]float64
	counts [Buckets + 1]atomic.Uint64 // per bucket, not cumulative; the last is above every bound
	sum    atomic.Uint64              // float64 bits
}

// Observe records v.
func (h *Histogram) Observe(v float64) {
	h.counts[sort.SearchFloat64s(h.upper[:], v)].Add(1)
	for {
		old := h.sum.Load()
		if h.sum.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			return
		}
	}
}

// Bounds returns the finite upper bounds; the caller must not change them.
func (h *Histogram) Bounds() *[Buckets]float64 { return h.upper }

// Bucket returns how many observations fell in bucket i (0..Buckets, the
// last above every bound), not cumulative.
func (h *Histogram) Bucket(i int) uint64 { return h.counts[i].Load() }

// Sum returns the sum of the observations.
func (h *Histogram) Sum() float64 { return math.Float64frombits(h.sum.Load()) }

// Task is one task's counters.
type Task struct {
	Name        string
	window      atomic.Int64           // ns: the slot window alerts scale with (Window)
	Claims      [lock.Late + 1]Counter // by lock.Result; index 0: no answer (ResultError)
	Runs        [len(Outcomes)]Counter // attempts by Outcomes' order
	Duration    Histogram              // attempt durations, seconds
	StartDelay  Histogram              // attempt start behind the slot time, seconds
	Renewals    Counter                // lease renewals confirmed
	LeaseLosses Counter                // leases lost while the task ran
	Exhausted   Counter                // slots whose last allowed attempt failed here
	Missed      Counter                // slots seen closing without a success
	// MissedCapacity: of Missed, the slots this replica waited to claim,
	// at max_running, until their window closed.
	MissedCapacity Counter
	// MissedBackoff: of Missed, the slots whose retry backoff after a
	// failed attempt ended at or after their deadline.
	MissedBackoff Counter
	// MissedQueue: of Missed, the slots whose window closed while they
	// waited for their task's running slot (concurrency = "queue"),
	// counted once for the fleet, by the waiter's replica.
	MissedQueue  Counter
	Backfilled   Counter                   // slots an operator's backfill started on this replica
	FinishErrors Counter                   // completions or releases that failed
	Skipped      [len(SkipReasons)]Counter // slots not run, by SkipReasons' order
	Paused       atomic.Bool               // the task is paused, as this replica last heard
	Running      atomic.Int64              // attempts running now
	Waiting      atomic.Int64              // attempts waiting for the task's running slot (concurrency = "queue")
	// WaitingSlot is the id of the slot waiting here for the task's
	// running one (concurrency = "queue"), for the task's page; nil if none.
	WaitingSlot  atomic.Pointer[string]
	BackfillLeft atomic.Int64 // slots of backfills under way here not yet ended (queued or admitted)
	lastSuccess  atomic.Int64 // Unix seconds; noSuccess until one
	_            [0]func()    // not comparable
}

// Window is the slot window alerts scale with, as last given to New or
// Update.
func (t *Task) Window() time.Duration { return time.Duration(t.window.Load()) }

// noSuccess marks a lastSuccess not yet set.
const noSuccess = math.MinInt64

// Claimed counts a claim answered with r. A result outside lock's set
// counts as an error: the answer was not understood.
func (t *Task) Claimed(r lock.Result) {
	if r < lock.Won || r > lock.Late {
		r = 0
	}
	t.Claims[r].Inc()
}

// ClaimFailed counts a claim that got no answer.
func (t *Task) ClaimFailed() { t.Claims[0].Inc() }

// Ran counts an attempt that ended with outcome, one of Outcomes (another
// counts as a failure).
func (t *Task) Ran(outcome Outcome) {
	i := slices.Index(Outcomes[:], outcome)
	if i < 0 {
		i = slices.Index(Outcomes[:], OutcomeFailure)
	}
	t.Runs[i].Inc()
}

// Skip counts a slot not run for reason, one of SkipReasons.
func (t *Task) Skip(reason string) {
	if i := slices.Index(SkipReasons[:], reason); i >= 0 {
		t.Skipped[i].Inc()
	}
}

// Succeeded moves the task's last success forward to slot, never back: a
// retry of an older slot that ends after a newer one must not lower it.
func (t *Task) Succeeded(slot time.Time) {
	sec := slot.Unix()
	for {
		old := t.lastSuccess.Load()
		if sec <= old || t.lastSuccess.CompareAndSwap(old, sec) {
			return
		}
	}
}

// LastSuccess returns the slot time of the latest slot completed, to the
// second; false if none yet.
func (t *Task) LastSuccess() (time.Time, bool) {
	sec := t.lastSuccess.Load()
	if sec == noSuccess {
		return time.Time{}, false
	}
	return time.Unix(sec, 0).UTC(), true
}

// Set is the counters of a list of tasks, which a reload may replace.
type Set struct {
	// Store is the store's errors and last results, for every task.
	Store Store
	// Notifications counts on_failure hooks by outcome, for every task.
	Notifications Notifications
	// Capacity is the replica's attempts against its max_running.
	Capacity Capacity
	list     atomic.Pointer[taskList]
}

// Capacity is a replica's running attempts, all tasks together, against
// its [daemon] max_running.
type Capacity struct {
	Max     atomic.Int64 // max_running; 0: no cap
	Running atomic.Int64 // attempts running now
	Waiting atomic.Int64 // slots waiting for room to be claimed
}

// taskList is one list of a Set's tasks; it is never changed once made.
type taskList struct {
	tasks  []*Task
	byName map[string]*Task
}

// TaskInfo is what a Set needs to know of a task.
type TaskInfo struct {
	Name   string
	Window time.Duration
}

// New returns the counters of tasks, all at zero, in their order; a name
// given twice shares one Task.
func New(tasks []TaskInfo) *Set {
	s := &Set{}
	s.Update(tasks)
	return s
}

// Update makes tasks the Set's list, in their order: a task already known
// keeps its counters (and takes the new window), a new one starts at zero.
// One left out is no longer listed by Tasks, but Task still finds it: its
// last attempts may still be running, and if a later update brings it
// back, its counters go on from where they were. A name given twice
// shares one Task. Readers may run alongside; Update calls must not
// overlap each other (the engine's loop makes them).
func (s *Set) Update(tasks []TaskInfo) {
	old := s.list.Load()
	l := &taskList{tasks: make([]*Task, 0, len(tasks)), byName: make(map[string]*Task, len(tasks))}
	if old != nil {
		maps.Copy(l.byName, old.byName)
	}
	listed := make(map[string]bool, len(tasks))
	for _, ti := range tasks {
		if listed[ti.Name] {
			continue
		}
		listed[ti.Name] = true
		t := l.byName[ti.Name]
		if t == nil {
			t = &Task{Name: ti.Name}
			t.Duration.upper, t.StartDelay.upper = DurationBounds, StartDelayBounds
			t.lastSuccess.Store(noSuccess)
		}
		t.window.Store(int64(ti.Window))
		l.tasks = append(l.tasks, t)
		l.byName[ti.Name] = t
	}
	s.list.Store(l)
}

// Task returns the named task's counters; nil for a name never given to
// New or Update.
func (s *Set) Task(name string) *Task { return s.list.Load().byName[name] }

// Tasks returns every task's counters in the list's order; the caller must
// not change the slice.
func (s *Set) Tasks() []*Task { return s.list.Load().tasks }

// Notify is how an on_failure hook ended, by the name the metrics give it.
type Notify string

// Outcomes of an on_failure hook, in the order of Notifications.
const (
	NotifySuccess Notify = "success" // the hook ran and succeeded
	NotifyFailure Notify = "failure" // the hook ran and failed, or timed out; not retried
	// NotifyError: the store could not say whether another replica had
	// already notified (the once marker); the hook did not run.
	NotifyError Notify = "store_error"
	// NotifyUnsupported: the store has no once marker (lock.Oncer), so no
	// replica could be sure to be the only one; the hook did not run.
	NotifyUnsupported Notify = "unsupported"
	// NotifyDropped: the replica already ran its most hooks at once
	// ([daemon] max_hooks); the hook did not run here, and its once marker
	// was left for a peer.
	NotifyDropped Notify = "dropped"
)

// NotifyOutcomes lists the outcomes in the order of Notifications.
var NotifyOutcomes = [...]Notify{NotifySuccess, NotifyFailure, NotifyError, NotifyUnsupported, NotifyDropped}

// Notifications counts on_failure hooks by outcome, in NotifyOutcomes'
// order.
type Notifications [len(NotifyOutcomes)]Counter

// Add counts one hook that ended with outcome, one of NotifyOutcomes
// (another counts as a failure).
func (n *Notifications) Add(outcome Notify) {
	i := slices.Index(NotifyOutcomes[:], outcome)
	if i < 0 {
		i = 1
	}
	n[i].Inc()
}
