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
	"math/rand/v2"
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
	tasks   []Task
	grace   time.Duration // for running attempts at shutdown
	maxSkew time.Duration // 0: not checked
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

	// settledRuns holds the runs parked until their deadline, grouped by
	// it (see parkSettled).
	settledMu   sync.Mutex
	settledRuns map[time.Time]*deadlineGroup

	// runs lists every slotRun that has not ended, so that shutdown can
	// unpark them (a list threaded through the runs: no allocation each).
	runsMu sync.Mutex
	runs   *slotRun
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

// WithReplica names this replica in claims, logs and history (default: the
// host name and process id).
func WithReplica(id string) Option { return func(s *Scheduler) { s.replica = id } }

// WithShutdownGrace sets how long running attempts may go on after Run's
// context ends before they are cancelled (default 30s).
func WithShutdownGrace(d time.Duration) Option { return func(s *Scheduler) { s.grace = d } }

// WithMaxClockSkew sets the skew against the store's clock beyond which
// the scheduler reports itself unhealthy and warns (default 1s; 0: never).
func WithMaxClockSkew(d time.Duration) Option { return func(s *Scheduler) { s.maxSkew = d } }

// WithHistory records every attempt's outcome in h (default: not recorded).
func WithHistory(h History) Option { return func(s *Scheduler) { s.hist = h } }

// New returns a scheduler for tasks on store. It does no I/O.
func New(tasks []Task, store lock.Store, opts ...Option) *Scheduler {
	s := &Scheduler{
		tasks:        tasks,
		grace:        DefaultShutdownGrace,
		maxSkew:      DefaultMaxClockSkew,
		store:        store,
		clock:        realClock{},
		log:          slog.Default(),
		replica:      DefaultReplica(),
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
	s.m = newMetrics(s.reg, s.tasks)
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

	s.log.Info("scheduler started", "tasks", len(s.tasks), "store_ok", s.storeOK.Load(),
		"clock_skew", time.Duration(s.skew.Load()))
	s.fireLoop(ctx, hard)

	s.log.Info("shutting down: no new attempts", "grace", s.grace)
	s.unparkAll()
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	grace := s.clock.NewTimer(s.grace)
	select {
	case <-done:
		grace.Stop()
	case <-grace.C():
		s.log.Warn("shutdown grace over: cancelling running attempts and releasing their slots")
		cancelHard(ErrShutdown)
		<-done
	}
	bg.Wait()
	s.stopDeadlines()
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
	h := make(entries, 0, len(s.tasks))
	var due []entry
	for i := range s.tasks {
		t := &s.tasks[i]
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

// startSlots begins the life of each due slot on this replica (see
// slotRun). The first claims of slots due together go to the store as one
// lock.ClaimMany, so that ten thousand of them cost a few round trips and
// one goroutine; another goroutine starts only for each slot won.
//
// Each replica claims them in its own random order. In the same order
// everywhere, the replica whose first round trip lands first would win
// nearly every slot, and run them all at once while its peers idle; in
// random orders each replica's first round trips win their own share, so
// the work of a burst spreads over the replicas.
func (s *Scheduler) startSlots(ctx, hard context.Context, due []entry) {
	if len(due) == 0 {
		return
	}
	runs := make([]*slotRun, len(due))
	for i, e := range due {
		runs[i] = s.newRun(ctx, hard, e.task, e.next)
	}
	rand.Shuffle(len(runs), func(i, j int) { runs[i], runs[j] = runs[j], runs[i] })
	if len(runs) == 1 {
		go runs[0].step(nil)
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		reqs := make([]lock.ClaimRequest, len(runs))
		lease := runs[0].t.Lease
		for i, r := range runs {
			reqs[i] = lock.ClaimRequest{Slot: r.slot, Replica: s.replica, Policy: r.policy()}
			lease = min(lease, r.t.Lease)
		}
		cctx, cancel := context.WithTimeout(ctx, lease/3)
		defer cancel()
		lock.ClaimMany(cctx, s.store, reqs, func(i int, reply lock.ClaimReply) {
			if reply.Err == nil && reply.Result == lock.Won {
				go runs[i].step(&reply)
			} else {
				runs[i].step(&reply) // parks at once: nothing to run
			}
		})
	}()
}

// slotRun is one slot's life on this replica, from its fire time to its
// deadline: claim, run if won, and otherwise wait until the slot is
// released, its holder's lease runs out, or it is settled (done or out of
// attempts) and then only for an operator's rerun until the deadline.
//
// No goroutine waits on its behalf: between claims it is parked on a
// clock timer (or, settled, in its deadline's group) and on its watch's
// OnChange, and a goroutine exists only while it claims or runs an
// attempt. Whichever of the timer, a notice or shutdown comes first
// unparks it, exactly once, by starting step; the goroutine in step is
// the run's only owner until it parks or ends.
type slotRun struct {
	s          *Scheduler
	ctx, hard  context.Context
	t          *Task
	slot       lock.Slot
	w          *lock.Watch
	prev, next *slotRun // in s.runs

	// Owned by the goroutine in step.
	log      *slog.Logger // made on first use: most slots never log
	failures int
	last     lock.Result
	settled  bool

	mu     sync.Mutex
	parked bool   // waiting: no goroutine
	parks  int    // times parked, so that a deadline group skips a stale entry
	news   notice // the latest notice since the last look
	// handingOff: after this replica's own failed attempt, until the
	// handoff pause ends. A release notice then is (or may be) its own,
	// published as it released: it must not cut the pause short.
	handingOff bool
	timer      Timer // while parked, unless in a deadline group
}

// notice is what the watch last said about the slot.
type notice int

const (
	noNotice notice = iota
	released        // released after a failure, or rerun by an operator: claim again
	done            // marked done by its holder: settled, no claim needed
)

// newRun registers slot at of task t with s.wg and starts watching it, so
// that a release that follows the first claim is seen.
func (s *Scheduler) newRun(ctx, hard context.Context, t *Task, at time.Time) *slotRun {
	r := &slotRun{s: s, ctx: ctx, hard: hard, t: t,
		slot: lock.Slot{Task: t.Name, ID: t.Schedule.SlotID(at), Time: at.UTC(), Deadline: t.SlotDeadline(at).UTC()}}
	s.wg.Add(1)
	r.w = s.store.Watch(r.slot)
	r.w.OnChange(r.wake)
	s.runsMu.Lock()
	r.next = s.runs
	if s.runs != nil {
		s.runs.prev = r
	}
	s.runs = r
	s.runsMu.Unlock()
	return r
}

// unparkAll unparks every parked run once ctx has ended; each then ends.
// A run busy now sees the end of ctx when it would park.
func (s *Scheduler) unparkAll() {
	var all []*slotRun
	s.runsMu.Lock()
	for r := s.runs; r != nil; r = r.next {
		all = append(all, r)
	}
	s.runsMu.Unlock()
	for _, r := range all {
		r.unpark()
	}
}

func (r *slotRun) policy() lock.Policy {
	return r.t.Policy
}

func (r *slotRun) logger() *slog.Logger {
	if r.log == nil {
		r.log = r.s.log.With("task", r.t.Name, "slot", r.slot.ID)
	}
	return r.log
}

// step claims (using first, if not nil, as the first claim's reply) and
// acts on the answer until the run parks or ends.
func (r *slotRun) step(first *lock.ClaimReply) {
	s := r.s
	for {
		if r.ctx.Err() != nil {
			r.end()
			return
		}
		if !s.now().Before(r.slot.Deadline) {
			// A holder still running past the deadline reports for itself.
			if !r.settled && r.last != lock.Held {
				s.m.task(r.t.Name).missed.Inc()
				r.logger().Warn("slot window closed without a success", "deadline", r.slot.Deadline)
			}
			r.end()
			return
		}
		if first == nil { // else news waits until first is handled: park sees it
			switch r.takeNews() {
			case released:
				r.settled = false // a release, or a rerun of a settled slot: claim again
			case done:
				r.settled = true // as a claim would find it, without the claim
			}
		}
		var wait time.Duration
		if !r.settled {
			reply := first
			if reply == nil {
				reply = r.claim()
			}
			first = nil
			wait, r.settled = r.handle(reply)
		}
		if r.settled {
			if r.parkSettled() {
				return
			}
			continue
		}
		if r.park(min(wait, r.slot.Deadline.Sub(s.now()))) {
			return
		}
	}
}

// claim makes one claim of the slot.
func (r *slotRun) claim() *lock.ClaimReply {
	cctx, cancel := context.WithTimeout(r.ctx, r.t.Lease/3)
	defer cancel()
	c, err := r.s.store.Claim(cctx, r.slot, r.s.replica, r.policy())
	return &lock.ClaimReply{Claim: c, Err: err}
}

// park waits wait for the timer, or for a notice, or for the end of ctx.
// It reports false, without parking, if a notice came while the run was
// busy (look at it now) or ctx has ended.
func (r *slotRun) park(wait time.Duration) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	// ctx.Err is read under mu: if it is nil here, unparkAll (called once
	// ctx has ended) will find the run parked.
	if r.news != noNotice || r.ctx.Err() != nil {
		return false
	}
	r.parked = true
	r.parks++
	r.timer = r.s.clock.AfterFunc(max(wait, 0), r.unpark)
	return true
}

// parkSettled is park until the deadline for a settled slot, which waits
// only for a rerun. It joins the deadline's group instead of setting a
// timer: the slots of one fire time share a deadline, and ten thousand
// timers firing at once would start as many goroutines, each to do nothing
// but stop its watch.
func (r *slotRun) parkSettled() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.news != noNotice || r.ctx.Err() != nil {
		return false
	}
	r.parked, r.timer = true, nil
	r.parks++
	r.s.joinDeadline(r, r.parks)
	return true
}

// deadlineGroup is the settled runs parked until one deadline, and the one
// timer that ends them.
type deadlineGroup struct {
	runs  []parkedRun
	timer Timer
}

type parkedRun struct {
	r     *slotRun
	parks int // the park the entry was made for
}

// joinDeadline adds r, parked for the parks-th time, to its deadline's
// group; called with r.mu held.
func (s *Scheduler) joinDeadline(r *slotRun, parks int) {
	s.settledMu.Lock()
	defer s.settledMu.Unlock()
	at := r.slot.Deadline
	g := s.settledRuns[at]
	if g == nil {
		if s.settledRuns == nil {
			s.settledRuns = map[time.Time]*deadlineGroup{}
		}
		g = &deadlineGroup{}
		s.settledRuns[at] = g
		g.timer = s.clock.AfterFunc(max(at.Sub(s.now()), 0)+expireLag, func() { s.expire(at) })
	}
	g.runs = append(g.runs, parkedRun{r, parks})
}

// expireLag is how long after their deadline settled runs are ended. A
// deadline is by default the next fire time, when the replica is busiest
// claiming the next slots; ending the old runs, which wait only for a rerun
// that can no longer start, is not urgent. A rerun announced in the lag
// wakes its run, which then finds the window closed and ends.
const expireLag = time.Second

// expire steps, one after the other on the timer's goroutine, the runs of
// the group of deadline at that are still parked where they joined it.
// step finds each past its deadline and ends it; one that the clock says
// is not (timers fire early by a hair on an adjusted clock) parks again.
func (s *Scheduler) expire(at time.Time) {
	s.settledMu.Lock()
	g := s.settledRuns[at]
	delete(s.settledRuns, at)
	s.settledMu.Unlock()
	if g == nil {
		return
	}
	for _, p := range g.runs {
		if p.r.take(p.parks) {
			p.r.step(nil)
		}
	}
}

// stopDeadlines stops the timers of the deadline groups, once every run
// has ended: their entries are all stale.
func (s *Scheduler) stopDeadlines() {
	s.settledMu.Lock()
	defer s.settledMu.Unlock()
	for at, g := range s.settledRuns {
		g.timer.Stop()
		delete(s.settledRuns, at)
	}
}

// take unparks r if it is still parked for the parks-th time.
func (r *slotRun) take(parks int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.parked || r.parks != parks {
		return false
	}
	r.parked, r.handingOff = false, false
	return true
}

// unpark starts step if the run is parked; the timer, a notice and
// shutdown call it. A run in a deadline group stays in it, as a stale entry.
func (r *slotRun) unpark() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.parked {
		return
	}
	r.parked, r.handingOff = false, false
	if r.timer != nil {
		r.timer.Stop()
	}
	go r.step(nil)
}

// wake is the watch's OnChange: it runs under the store's lock, so it
// only notes the news (the latest wins: a rerun after a completion means
// claim, a completion after a release means settled) and unparks. A
// completion of a slot parked on its timer settles it here instead, as
// step would, without a goroutine: that is how the replicas that lost a
// burst's slots hear of each, ten thousand at once.
func (r *slotRun) wake(isDone bool) {
	r.mu.Lock()
	if !isDone && r.handingOff {
		// Our own release, most likely; another (a peer's, a rerun) waits
		// for the pause to end, which is short.
		r.mu.Unlock()
		return
	}
	if isDone && r.parked && r.settled {
		// Settled already (its claim found the slot done, or an earlier
		// notice said so): a completion changes nothing, and waking the run
		// would cost a goroutine only to park it again.
		r.mu.Unlock()
		return
	}
	if isDone && r.parked && r.timer != nil && r.ctx.Err() == nil && r.timer.Stop() {
		r.settled = true // no goroutine owns the run while it is parked
		r.news, r.handingOff = noNotice, false
		r.timer = nil
		r.parks++
		r.s.joinDeadline(r, r.parks)
		r.mu.Unlock()
		return
	}
	r.news = released
	if isDone {
		r.news = done
	}
	r.mu.Unlock()
	r.unpark()
}

func (r *slotRun) takeNews() notice {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.news
	r.news, r.handingOff = noNotice, false
	return n
}

// end finishes the run: it is not parked and no timer is set.
func (r *slotRun) end() {
	r.w.Stop()
	s := r.s
	s.runsMu.Lock()
	if r.prev != nil {
		r.prev.next = r.next
	} else {
		s.runs = r.next
	}
	if r.next != nil {
		r.next.prev = r.prev
	}
	r.prev, r.next = nil, nil
	s.runsMu.Unlock()
	s.wg.Done()
}

// handle acts on a claim's reply: runs the task if won. It returns how
// long to wait before the next claim, and whether the slot is settled
// (done or out of attempts).
func (r *slotRun) handle(reply *lock.ClaimReply) (time.Duration, bool) {
	s, t, c, err := r.s, r.t, reply.Claim, reply.Err
	r.last = c.Result
	if err != nil {
		s.m.task(t.Name).claimFailed()
		wait := s.claimRetry(err, r.failures)
		r.failures++
		switch {
		case r.ctx.Err() != nil:
		case errors.Is(err, lock.ErrForeign):
			// Somebody else's data: never overwrite it, never run over it.
			r.logger().Error("slot keys hold a value slotd did not write; not running the slot, leaving the keys alone",
				"err", err, "retry_in", wait)
		default:
			r.logger().Warn("claim failed; not running, will retry", "err", err, "retry_in", wait)
		}
		return wait, false
	}
	r.failures = 0
	s.m.task(t.Name).claimed(c.Result)
	switch c.Result {
	case lock.Won:
		if s.attempt(r.ctx, r.hard, t, r.slot, c) {
			return 0, true
		}
		if c.Attempt-c.Base >= t.MaxAttempts {
			s.m.task(t.Name).exhausted.Inc()
			r.logger().Error("slot exhausted: its last allowed attempt failed", "attempts", c.Attempt-c.Base)
			return 0, true
		}
		// Let a peer go first: our own release's notice, which may arrive
		// before or after this, must not wake us (see wake).
		r.mu.Lock()
		r.news, r.handingOff = noNotice, true
		r.mu.Unlock()
		return s.handoff.Delay(0), false
	case lock.Done, lock.Exhausted:
		if s.log.Enabled(r.ctx, slog.LevelDebug) {
			r.logger().Debug("slot settled", "result", c.Result, "holder", c.Holder, "attempt", c.Attempt)
		}
		return 0, true
	case lock.Late:
		// The store's clock says the window closed; ours may lag a little.
		s.m.task(t.Name).missed.Inc()
		r.logger().Warn("slot window closed without a success", "deadline", r.slot.Deadline)
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
func (s *Scheduler) attempt(ctx, hard context.Context, t *Task, slot lock.Slot, c lock.Claim) bool {
	// One With for the attempt's four attributes, made on first use: a JSON
	// handler formats them at once, a burst makes ten thousand of these,
	// and at level warn most attempts log nothing.
	log := sync.OnceValue(func() *slog.Logger {
		return s.log.With("task", t.Name, "slot", slot.ID, "attempt", c.Attempt, "token", lock.Token(slot.Time, c.Attempt))
	})
	st := s.m.task(t.Name)
	lease := lock.Hold(hard, s.store, slot, s.replica, c, t.Lease, lock.LeaseHooks{
		Renewed: st.renewals.Inc,
		Lost: func(err error) {
			st.leaseLosses.Inc()
			log().Error("lease lost: cancelling the task", "err", err)
		},
	})
	run := tasks.Run{
		Task: t.Name, Slot: slot.ID, SlotTime: slot.Time, Attempt: c.Attempt,
		Token: lease.Token(), Replica: s.replica,
	}
	tctx, cancel := context.WithTimeoutCause(lease.Context(), t.Timeout, ErrTimeout)
	defer cancel()
	start := s.now()
	st.startDelay.Observe(max(start.Sub(slot.Time), 0).Seconds())
	st.running.Add(1)
	if s.log.Enabled(ctx, slog.LevelInfo) {
		log().Info("attempt started", "delay", start.Sub(slot.Time))
	}
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
			log().Warn("slot marked done, but not acknowledged by min_replicas_ack replicas", "err", ferr)
			ferr = nil
		}
		if ferr != nil {
			// The task ran but the slot is not marked done: a peer may run it
			// again after the lease; the fencing token tells them apart.
			st.ran(outcomeLeaseLost)
			st.finishErrors.Inc()
			log().Error("task succeeded but the slot could not be marked done", "err", ferr, "duration", took)
			entry.Outcome, entry.Error = outcomeLeaseLost, "task succeeded but the slot could not be marked done: "+ferr.Error()
			s.record(ctx, t.Name, entry, log)
			return true
		}
		st.ran(outcomeSuccess)
		st.succeeded(slot.Time)
		if s.log.Enabled(ctx, slog.LevelInfo) {
			log().Info("attempt succeeded", "duration", took)
		}
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
	log().Warn("attempt failed", "outcome", outcome, "err", err, "duration", took)
	if rerr := lease.Release(fctx); rerr != nil {
		st.finishErrors.Inc()
		log().Error("release failed; the slot frees when its lease runs out", "err", rerr)
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
	if limit := s.maxSkew; limit > 0 && skew.Abs() > limit {
		s.log.Warn("clock skew against the store exceeds max_clock_skew", "skew", skew, "max", limit)
	}
}
