// Package scheduler is slotd's daemon core: it loads the configuration,
// computes every task's slots from its schedule, and on each replica races
// for them through a lock.Store, runs the slots it wins under a lease
// watchdog, and watches the slots a peer holds until they are done,
// exhausted or past their deadline.
//
// Guarantees, given a store that keeps the lock package's (see lock):
//   - a slot's attempts start no earlier than its slot time by the store's
//     clock and never after its deadline;
//   - an attempt runs only while its lease holds; a lost lease cancels it
//     (context cause lock.ErrLeaseLost) and the slot is not marked done;
//   - a failed attempt is released at once and every replica watching the
//     slot is woken to retry it, up to the task's max_attempts;
//   - a replica that cannot reach the store runs nothing, and keeps trying
//     to claim within the slot window;
//   - on shutdown no new attempt starts, running ones get shutdown_grace to
//     finish, and then are cancelled and their slots released for a peer.
package scheduler

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/retry"
	"github.com/slotd/slotd/tasks"
)

// Causes of a task's context being cancelled, besides lock.ErrLeaseLost.
var (
	// ErrTimeout: the attempt ran longer than the task's timeout.
	ErrTimeout = errors.New("scheduler: task timed out")
	// ErrShutdown: the daemon is stopping and the grace period is over.
	ErrShutdown = errors.New("scheduler: shutting down")
)

// Scheduler runs one replica's share of the configured tasks.
type Scheduler struct {
	cfg     *Config
	store   lock.Store
	clock   Clock
	log     *slog.Logger
	reg     prometheus.Registerer
	m       *metrics
	hist    History // nil: attempts are not recorded
	replica string

	// backoff spaces claims after store errors; handoff is the short,
	// jittered pause before a replica retries a slot it just failed, which
	// lets a woken peer go first.
	backoff retry.Backoff
	handoff retry.Backoff
	// checkEvery is how often the store's clock is compared with ours while
	// it answers; recheckEvery, while it does not.
	checkEvery, recheckEvery time.Duration

	offset  atomic.Int64 // store clock minus ours, ns; the timer loop fires on the store's time
	skew    atomic.Int64 // as last measured, ns
	storeOK atomic.Bool

	wg sync.WaitGroup // one per slot being worked on
}

// Option configures a Scheduler.
type Option func(*Scheduler)

// WithClock replaces the system clock, for tests.
func WithClock(c Clock) Option { return func(s *Scheduler) { s.clock = c } }

// WithLogger sets the logger (default: slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(s *Scheduler) { s.log = l } }

// WithClockCheck sets how often the store's clock and reachability are
// checked (default 10s; every second while the store is down).
func WithClockCheck(every time.Duration) Option {
	return func(s *Scheduler) { s.checkEvery, s.recheckEvery = every, min(every, s.recheckEvery) }
}

// WithRegisterer registers the scheduler's metrics with reg (default: a
// private registry, i.e. not exported).
func WithRegisterer(reg prometheus.Registerer) Option { return func(s *Scheduler) { s.reg = reg } }

// WithHistory records every attempt's outcome in h (default: not recorded).
func WithHistory(h History) Option { return func(s *Scheduler) { s.hist = h } }

// New returns a scheduler for cfg's tasks on store. It does no I/O.
func New(cfg *Config, store lock.Store, opts ...Option) *Scheduler {
	s := &Scheduler{
		cfg:          cfg,
		store:        store,
		clock:        realClock{},
		log:          slog.Default(),
		replica:      cfg.Replica,
		backoff:      retry.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second},
		handoff:      retry.Backoff{Min: 20 * time.Millisecond, Max: 200 * time.Millisecond},
		checkEvery:   10 * time.Second,
		recheckEvery: time.Second,
	}
	for _, o := range opts {
		o(s)
	}
	if s.reg == nil {
		s.reg = prometheus.NewRegistry()
	}
	s.m = newMetrics(s.reg, cfg.Tasks)
	s.log = s.log.With("replica", s.replica)
	return s
}

// Healthy reports whether the store answered its last check, and the clock
// skew against the store as last measured.
func (s *Scheduler) Healthy() (storeOK bool, skew time.Duration) {
	return s.storeOK.Load(), time.Duration(s.skew.Load())
}

// now is the store's time as this replica best knows it.
func (s *Scheduler) now() time.Time {
	return s.clock.Now().Add(time.Duration(s.offset.Load()))
}

// Run fires the tasks' slots until ctx is done, then shuts down: it stops
// claiming, gives running attempts shutdown_grace to finish, then cancels
// them and releases their slots. It returns when every slot goroutine has
// ended.
func (s *Scheduler) Run(ctx context.Context) error {
	// Attempts run under hard, which outlives ctx by the grace period.
	hard, cancelHard := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancelHard(ErrShutdown)

	s.checkClock(ctx)
	var bg sync.WaitGroup
	bg.Add(1)
	go func() {
		defer bg.Done()
		s.clockLoop(ctx)
	}()

	s.log.Info("scheduler started", "tasks", len(s.cfg.Tasks), "store_ok", s.storeOK.Load(),
		"clock_skew", time.Duration(s.skew.Load()))
	s.fireLoop(ctx, hard)

	s.log.Info("shutting down: no new attempts", "grace", s.cfg.ShutdownGrace)
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	grace := s.clock.NewTimer(s.cfg.ShutdownGrace)
	select {
	case <-done:
		grace.Stop()
	case <-grace.C():
		s.log.Warn("shutdown grace over: cancelling running attempts and releasing their slots")
		cancelHard(ErrShutdown)
		<-done
	}
	bg.Wait()
	s.log.Info("scheduler stopped")
	return nil
}

// entry is one task in the timer heap.
type entry struct {
	task *Task
	next time.Time
}

type entries []*entry

func (h entries) Len() int           { return len(h) }
func (h entries) Less(i, j int) bool { return h[i].next.Before(h[j].next) }
func (h entries) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *entries) Push(x any)        { *h = append(*h, x.(*entry)) }
func (h *entries) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// fireLoop is the one goroutine that owns the timer. It starts a slot
// goroutine at each fire time, and at start-up for a window still open when
// the task's catchup is "latest".
func (s *Scheduler) fireLoop(ctx, hard context.Context) {
	now := s.now()
	h := make(entries, 0, len(s.cfg.Tasks))
	var due []entry
	for i := range s.cfg.Tasks {
		t := &s.cfg.Tasks[i]
		if t.Catchup == "latest" {
			if slot, ok := t.Schedule.Latest(now); ok && now.Before(t.SlotDeadline(slot)) {
				due = append(due, entry{task: t, next: slot})
			}
		}
		if next := t.Schedule.Next(now); !next.IsZero() {
			h = append(h, &entry{task: t, next: next})
		}
	}
	s.startSlots(ctx, hard, due)
	heap.Init(&h)
	for len(h) > 0 {
		// Wake at least once per clock check: if the wall clock steps or the
		// measured offset changes, the next fire time is due sooner or later
		// than this wait says.
		wait := min(h[0].next.Sub(s.now()), s.checkEvery)
		timer := s.clock.NewTimer(max(wait, 0))
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C():
		}
		now := s.now()
		due = due[:0]
		for len(h) > 0 && !h[0].next.After(now) {
			e := h[0]
			// A fire time that passed while this process was stalled still
			// runs if its window is open; each slot is claimed by its own id,
			// so a late start cannot run a slot twice.
			if now.Before(e.task.SlotDeadline(e.next)) {
				due = append(due, *e)
			} else {
				s.m.task(e.task.Name).missed.Inc()
				s.log.Warn("slot missed: its window closed before this replica could fire it",
					"task", e.task.Name, "slot", e.task.Schedule.SlotID(e.next))
			}
			if e.next = e.task.Schedule.Next(e.next); e.next.IsZero() {
				heap.Pop(&h)
			} else {
				heap.Fix(&h, 0)
			}
		}
		s.startSlots(ctx, hard, due)
	}
	<-ctx.Done()
}

// startSlots starts one goroutine per due slot. The first claims of slots
// due together form one lock.Burst, so that the store sends them in as few
// round trips as its batches allow.
func (s *Scheduler) startSlots(ctx, hard context.Context, due []entry) {
	var burst *lock.Burst
	if len(due) > 1 {
		burst = lock.NewBurst(len(due))
	}
	for _, e := range due {
		t, at := e.task, e.next
		slot := lock.Slot{Task: t.Name, ID: t.Schedule.SlotID(at), Time: at.UTC(), Deadline: t.SlotDeadline(at).UTC()}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.work(ctx, hard, t, slot, burst)
		}()
	}
}

// work sees one slot through on this replica: claim, run if won, and
// otherwise watch until the slot is done, exhausted or past its deadline.
// Its first claim is a member of burst (nil: none).
func (s *Scheduler) work(ctx, hard context.Context, t *Task, slot lock.Slot, burst *lock.Burst) {
	log := s.log.With("task", t.Name, "slot", slot.ID)
	defer func() { burst.Skip() }() // never claimed: the burst must not wait for it
	// Watch before the first claim, so a release that follows it is seen.
	w := s.store.Watch(slot)
	defer w.Stop()
	failures := 0
	var last lock.Result
	// settled: the slot succeeded or exhausted its attempts. The replica
	// still watches it until the deadline, for an operator's rerun.
	settled := false
	for ctx.Err() == nil {
		if !s.now().Before(slot.Deadline) {
			// A holder still running past the deadline reports for itself.
			if !settled && last != lock.Held {
				s.m.task(t.Name).missed.Inc()
				log.Warn("slot window closed without a success", "deadline", slot.Deadline)
			}
			return
		}
		var wait time.Duration
		if settled {
			wait = slot.Deadline.Sub(s.now())
		} else {
			wait, settled = s.claim(ctx, hard, t, slot, burst, w, &failures, &last, log)
			burst = nil
		}
		if settled {
			wait = slot.Deadline.Sub(s.now())
		}
		wait = min(wait, slot.Deadline.Sub(s.now()))
		timer := s.clock.NewTimer(max(wait, 0))
		select {
		case <-ctx.Done():
		case <-w.C():
			settled = false // a rerun: claim again
		case <-timer.C():
		}
		timer.Stop()
	}
}

// claim makes one claim of slot, as a member of burst if not nil, and acts
// on the answer: runs the task if won. It returns how long to wait before the next claim, and whether the
// slot is settled (done or out of attempts).
func (s *Scheduler) claim(ctx, hard context.Context, t *Task, slot lock.Slot, burst *lock.Burst, w *lock.Watch, failures *int, last *lock.Result, log *slog.Logger) (time.Duration, bool) {
	p := lock.Policy{Lease: t.Lease, DoneTTL: t.DoneTTL, MaxAttempts: t.MaxAttempts}
	cctx, cancel := context.WithTimeout(ctx, t.Lease/3)
	c, err := s.store.Claim(burst.Join(cctx), slot, s.replica, p)
	cancel()
	*last = c.Result
	if err != nil {
		s.m.task(t.Name).claimFailed()
		wait := s.claimRetry(err, *failures)
		*failures++
		switch {
		case ctx.Err() != nil:
		case errors.Is(err, lock.ErrForeign):
			// Somebody else's data: never overwrite it, never run over it.
			log.Error("slot keys hold a value slotd did not write; not running the slot, leaving the keys alone",
				"err", err, "retry_in", wait)
		default:
			log.Warn("claim failed; not running, will retry", "err", err, "retry_in", wait)
		}
		return wait, false
	}
	*failures = 0
	s.m.task(t.Name).claimed(c.Result)
	switch c.Result {
	case lock.Won:
		if s.attempt(ctx, hard, t, slot, c, log) {
			return 0, true
		}
		if c.Attempt-c.Base >= t.MaxAttempts {
			s.m.task(t.Name).exhausted.Inc()
			log.Error("slot exhausted: its last allowed attempt failed", "attempts", c.Attempt-c.Base)
			return 0, true
		}
		// Our own release woke us too; let a peer go first.
		select {
		case <-w.C():
		default:
		}
		return s.handoff.Delay(0), false
	case lock.Done, lock.Exhausted:
		log.Debug("slot settled", "result", c.Result, "holder", c.Holder, "attempt", c.Attempt)
		return 0, true
	case lock.Late:
		// The store's clock says the window closed; ours may lag a little.
		s.m.task(t.Name).missed.Inc()
		log.Warn("slot window closed without a success", "deadline", slot.Deadline)
		return 0, true
	case lock.Held:
		// Woken early by a release; otherwise try when the lease would run
		// out, with a little jitter so watchers do not stampede.
		return c.Wait + s.handoff.Delay(0), false
	case lock.Early:
		return c.Wait, false
	}
	return s.backoff.Delay(0), false
}

// claimRetry is the wait before claiming again after the failures-th
// failed claim in a row. After a Redlock round without a quorum (a split
// vote, or too few nodes answered) it is random from the first retry on —
// Redlock's random delay, so that contenders that split one round do not
// collide again in the next; Backoff.Delay(0) alone would be exactly Min.
func (s *Scheduler) claimRetry(err error, failures int) time.Duration {
	if errors.Is(err, lock.ErrNoQuorum) {
		return s.backoff.Delay(failures + 1)
	}
	return s.backoff.Delay(failures)
}

// attempt runs a won claim and completes or releases the slot. It reports
// whether this replica is finished with the slot: the task succeeded — even
// if the slot could not then be marked done, since running it again here
// would only add a duplicate (a peer may still, after the lease).
func (s *Scheduler) attempt(ctx, hard context.Context, t *Task, slot lock.Slot, c lock.Claim, log *slog.Logger) bool {
	log = log.With("attempt", c.Attempt)
	st := s.m.task(t.Name)
	lease := lock.Hold(hard, s.store, slot, s.replica, c, t.Lease, lock.LeaseHooks{
		Renewed: st.renewals.Inc,
		Lost: func(err error) {
			st.leaseLosses.Inc()
			log.Error("lease lost: cancelling the task", "err", err)
		},
	})
	log = log.With("token", lease.Token())
	run := tasks.Run{
		Task: t.Name, Slot: slot.ID, SlotTime: slot.Time, Attempt: c.Attempt,
		Token: lease.Token(), Replica: s.replica,
	}
	tctx, cancel := context.WithTimeoutCause(lease.Context(), t.Timeout, ErrTimeout)
	defer cancel()
	start := s.now()
	st.startDelay.Observe(max(start.Sub(slot.Time), 0).Seconds())
	st.running.Add(1)
	log.Info("attempt started", "delay", start.Sub(slot.Time))
	err := runTask(tasks.WithRun(tctx, run), t.Job)
	st.running.Add(-1)
	took := s.now().Sub(start)
	st.duration.Observe(took.Seconds())
	entry := HistoryEntry{
		Slot: slot.ID, SlotTime: slot.Time, Attempt: c.Attempt, Token: lease.Token(),
		Replica: s.replica, Started: start, Duration: took,
	}

	// Finishing must outlive shutdown; the lease bounds it.
	fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), t.Lease)
	defer fcancel()
	if err == nil && tctx.Err() == nil {
		ferr := lease.Complete(fctx, t.DoneTTL)
		if errors.Is(ferr, lock.ErrNotReplicated) {
			// Done on the master; a failover before the replicas catch up
			// could lose the marker and let a peer run the slot again.
			log.Warn("slot marked done, but not acknowledged by min_replicas_ack replicas", "err", ferr)
			ferr = nil
		}
		if ferr != nil {
			// The task ran but the slot is not marked done: a peer may run it
			// again after the lease; the fencing token tells them apart.
			st.ran(outcomeLeaseLost)
			st.finishErrors.Inc()
			log.Error("task succeeded but the slot could not be marked done", "err", ferr, "duration", took)
			entry.Outcome, entry.Error = outcomeLeaseLost, "task succeeded but the slot could not be marked done: "+ferr.Error()
			s.record(ctx, t.Name, entry, log)
			return true
		}
		st.ran(outcomeSuccess)
		st.succeeded(slot.Time)
		log.Info("attempt succeeded", "duration", took)
		entry.Outcome = outcomeSuccess
		s.record(ctx, t.Name, entry, log)
		return true
	}
	outcome := outcomeFailure
	switch cause := context.Cause(tctx); {
	case errors.Is(cause, lock.ErrLeaseLost):
		outcome = outcomeLeaseLost
	case errors.Is(cause, ErrTimeout):
		outcome = outcomeTimeout
	case errors.Is(cause, ErrShutdown):
		outcome = outcomeCanceled
	}
	if err == nil {
		err = context.Cause(tctx)
	}
	st.ran(outcome)
	log.Warn("attempt failed", "outcome", outcome, "err", err, "duration", took)
	if rerr := lease.Release(fctx); rerr != nil {
		st.finishErrors.Inc()
		log.Error("release failed; the slot frees when its lease runs out", "err", rerr)
	}
	entry.Outcome, entry.Error = outcome, err.Error()
	s.record(ctx, t.Name, entry, log)
	return false
}

// runTask runs job, turning a panic into an error so that one bad plugin
// cannot take the daemon down.
func runTask(ctx context.Context, job tasks.Task) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("task panicked: %v\n%s", r, debug.Stack())
		}
	}()
	return job.Run(ctx)
}

// clockLoop measures the store's reachability and clock skew periodically.
func (s *Scheduler) clockLoop(ctx context.Context) {
	for {
		every := s.checkEvery
		if !s.storeOK.Load() {
			every = s.recheckEvery
		}
		t := s.clock.NewTimer(every)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		s.checkClock(ctx)
	}
}

// checkClock asks the store for its time once. The offset it measures is
// applied to the timer loop, so a replica whose clock is off still fires on
// the store's time; claims are checked against the store's clock anyway.
func (s *Scheduler) checkClock(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	t0 := s.clock.Now()
	st, err := s.store.Time(cctx)
	t1 := s.clock.Now()
	if err != nil {
		if s.storeOK.Swap(false) || s.skew.Load() == 0 {
			s.log.Warn("store unreachable", "err", err)
		}
		s.m.redisUp.Set(0)
		return
	}
	if !s.storeOK.Swap(true) {
		s.log.Info("store reachable")
	}
	s.m.redisUp.Set(1)
	rtt := t1.Sub(t0)
	skew := st.Sub(t0.Add(rtt / 2))
	// Below the measurement's own uncertainty the skew is noise.
	if skew.Abs() <= rtt/2+time.Millisecond {
		skew = 0
	}
	s.skew.Store(int64(skew))
	s.offset.Store(int64(skew))
	s.m.clockSkew.Set(skew.Seconds())
	if limit := s.cfg.MaxClockSkew; limit > 0 && skew.Abs() > limit {
		s.log.Warn("clock skew against the store exceeds max_clock_skew", "skew", skew, "max", limit)
	}
}
