// Package scheduler is slotd's daemon core: it computes every task's
// slots from its schedule, and on each replica races for them through a
// lock.Store, runs the slots it wins under a lease watchdog, and watches
// the slots a peer holds until they are done, exhausted or past their
// deadline.
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
//   - a store that answers but refuses writes (OOM, NOPERM, READONLY: see
//     lock.ErrorKind) is seen by a write probe with each clock check and by
//     every claim, renewal, completion and release, counted by kind, logged
//     with its fix, and reported by Refused and Healthy;
//   - on shutdown no new attempt starts, running ones get shutdown_grace to
//     finish, and then are cancelled and their slots released for a peer.
//
// One goroutine, the loop (loop.go), owns every slot's life on this
// replica (run.go); claims, attempts (attempt.go) and the store's notices
// reach it as events in its mailbox.
package scheduler

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/slotd/slotd/internal/stats"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/retry"
)

// Causes of a task's context being cancelled, besides lock.ErrLeaseLost.
var (
	// ErrTimeout: the attempt ran longer than the task's timeout.
	ErrTimeout = errors.New("scheduler: task timed out")
	// ErrShutdown: the daemon is stopping and the grace period is over.
	ErrShutdown = errors.New("scheduler: shutting down")
)

// ErrDuplicateReplica is returned by Run when another live process
// announces the same replica id in the store.
var ErrDuplicateReplica = errors.New("scheduler: replica id in use by another live process")

// Scheduler runs one replica's share of the configured tasks.
type Scheduler struct {
	// tasks is the list the loop runs; Reload replaces it whole (never in
	// place) from the loop, and Tasks reads it from any goroutine.
	tasks   atomic.Pointer[[]Task]
	grace   time.Duration // for running attempts at shutdown
	maxSkew time.Duration // 0: not checked
	store   lock.Store
	clock   Clock
	log     *slog.Logger
	stats   *stats.Set // per-task counters, read by package observe
	hist    History    // nil: attempts are not recorded
	replica string
	// instance is this process's nonce; owner, "<replica>#<instance>", is
	// the id its claims are made with, so that no other process started
	// with the same replica id can renew, complete or release them.
	instance, owner string
	fleet           lock.Fleet // nil: the store has no fleet (Memory)
	// controls: the store's operator controls; nil if it has none
	// (Redlock): then no task is paused, triggered or held to a
	// concurrency policy.
	controls lock.Controls
	// hooks holds a token per on_failure hook running (WithMaxHooks);
	// hookWaits one per slot end on its way to a hook (notify.go).
	hooks     chan struct{}
	hookWaits chan struct{}
	announced bool // set by Run before the clock loop starts: the clock check renews the presence
	// firstStart is the fleet's first start as the store recorded it, set
	// by Run before the loop starts (zero if unknown); logged only.
	firstStart time.Time

	// backoff spaces claims after store errors; handoff is the short pause
	// before a replica retries a slot it just failed, which lets a woken
	// peer go first (also the jitter after a lease it saw runs out).
	backoff retry.Backoff
	handoff retry.Backoff
	// checkEvery is how often the store's clock is compared with ours while
	// it answers; recheckEvery, while it does not.
	checkEvery, recheckEvery time.Duration

	// mu guards loop and ran: Reload hands its tasks to the loop while Run
	// runs it, and before Run sets them itself.
	mu   sync.Mutex
	loop *loop
	ran  bool // Run has returned: nothing more is reloaded
	// live: the fleet's live replica ids, sorted, as the last announce read
	// them; nil: claim every slot at once (see prefer.go).
	live atomic.Pointer[[]liveID]

	maxRunning int // 0: no cap; see capacity.go

	offset  atomic.Int64 // store clock minus ours, ns; the loop fires on the store's time
	skew    atomic.Int64 // as last measured, ns
	storeOK atomic.Bool
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

// WithReplica names this replica in claims, logs and history (default: the
// host name and process id). Claims are owned by "<id>#<instance>", the
// instance being a random nonce per Scheduler (see Instance).
func WithReplica(id string) Option { return func(s *Scheduler) { s.replica = id } }

// WithShutdownGrace sets how long running attempts may go on after Run's
// context ends before they are cancelled (default 30s).
func WithShutdownGrace(d time.Duration) Option { return func(s *Scheduler) { s.grace = d } }

// WithMaxClockSkew sets the skew against the store's clock beyond which
// the scheduler reports itself unhealthy and warns (default 1s; 0: never).
func WithMaxClockSkew(d time.Duration) Option { return func(s *Scheduler) { s.maxSkew = d } }

// WithMaxHooks caps the on_failure hooks this replica runs at once
// (default DefaultMaxHooks; n < 1 counts as 1). A slot's hook that finds
// them all running does not run here: it is counted as dropped, and its
// once marker is left for a peer to take.
func WithMaxHooks(n int) Option {
	return func(s *Scheduler) { s.hooks = make(chan struct{}, max(n, 1)) }
}

// WithHistory records every attempt's outcome in h (default: not recorded).
func WithHistory(h History) Option { return func(s *Scheduler) { s.hist = h } }

// New returns a scheduler for tasks on store. It does no I/O.
func New(tasks []Task, store lock.Store, opts ...Option) *Scheduler {
	s := &Scheduler{
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
		hooks:        make(chan struct{}, DefaultMaxHooks),
	}
	for _, o := range opts {
		o(s)
	}
	s.hookWaits = make(chan struct{}, min(hookWaitsPerHook*cap(s.hooks), maxHookWaits))
	s.instance = newInstance()
	s.owner = lock.OwnerID(s.replica, s.instance)
	s.fleet, _ = store.(lock.Fleet)
	s.controls, _ = store.(lock.Controls)
	s.stats = stats.New(nil)
	s.stats.Capacity.Max.Store(int64(s.maxRunning))
	s.setTasks(tasks)
	s.log = s.log.With("replica", s.replica)
	return s
}

// Healthy reports whether the store answered its last check — its clock,
// and the write probe where the store has one — and does not refuse
// writes (see Refused), and the clock skew against the store as last
// measured.
func (s *Scheduler) Healthy() (storeOK bool, skew time.Duration) {
	_, refused := s.Refused()
	ok := s.storeOK.Load() && s.stats.Store.LastProbe().Kind == lock.KindNone && !refused
	return ok, time.Duration(s.skew.Load())
}

// Stats returns the per-task counters, which package observe writes out
// as metrics. They are the scheduler's for its whole life.
func (s *Scheduler) Stats() *stats.Set { return s.stats }

// Tasks returns the tasks the scheduler runs; the caller must not change
// them.
func (s *Scheduler) Tasks() []Task { return *s.tasks.Load() }

// now is the store's time as this replica best knows it.
func (s *Scheduler) now() time.Time {
	return s.clock.Now().Add(time.Duration(s.offset.Load()))
}

// Run fires the tasks' slots until ctx is done, then shuts down: it stops
// claiming, gives running attempts shutdown_grace to finish, then cancels
// them and releases their slots. It returns when every slot's run on this
// replica, and every goroutine it started, has ended.
//
// On a store that is a lock.Fleet, Run first announces the replica id for
// this process and returns an error wrapping ErrDuplicateReplica, running
// nothing, if another live process holds it (see announce); it records the
// fleet's first start, and withdraws the id (leaving the fleet's live set)
// as soon as ctx ends, while running attempts still have their grace.
func (s *Scheduler) Run(ctx context.Context) error {
	// Attempts run under hard, which outlives ctx by the grace period.
	hard, cancelHard := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancelHard(ErrShutdown)

	s.checkClock(ctx)
	if err := s.announce(ctx); err != nil {
		return err
	}
	s.announced = true
	s.started(ctx)
	var bg sync.WaitGroup
	bg.Add(1)
	go func() {
		defer bg.Done()
		var loops sync.WaitGroup
		loops.Go(func() { s.clockLoop(ctx) })
		loops.Go(func() { s.watchFleet(ctx) })
		loops.Wait()
		// ctx has ended: this replica fires and claims nothing more. It
		// leaves the fleet now rather than after the grace, so that its
		// peers stop deferring its preferred slots to it; after both
		// loops, so that no renewal of its presence follows the
		// withdrawal (whose own notice would otherwise bring one).
		s.withdraw(ctx)
	}()

	s.log.Info("scheduler started", "tasks", len(s.Tasks()), "store_ok", s.storeOK.Load(),
		"clock_skew", time.Duration(s.skew.Load()), "instance", s.instance, "fleet_first_start", s.firstStart)
	// Under mu: a Reload goes either before the loop reads the tasks or
	// through its mailbox.
	s.mu.Lock()
	l := newLoop(s, ctx, hard, cancelHard)
	l.paused = map[string]bool{}
	for _, t := range s.Tasks() {
		// Without controls in the store, paused = true holds on each
		// replica from its own config.
		l.setPaused(t.Name, t.Paused)
		s.stats.Task(t.Name).Paused.Store(t.Paused)
	}
	if s.controls != nil {
		l.ctl = newController(s, &l.inbox)
		l.paused = l.ctl.first(ctx)
		bg.Add(1)
		go func() {
			defer bg.Done()
			l.ctl.run(ctx)
		}()
	}
	s.loop = l
	s.mu.Unlock()
	l.run()
	s.mu.Lock()
	s.loop, s.ran = nil, true
	s.mu.Unlock()
	l.refuseReloads()
	l.workers.Wait()
	bg.Wait()
	s.log.Info("scheduler stopped")
	return nil
}

// newInstance is a random nonce naming this process among those that
// share its replica id.
func newInstance() string {
	var b [6]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24)
	return hex.EncodeToString(b[:])
}

// Instance is this process's nonce: its claims are owned by
// "<replica>#<instance>".
func (s *Scheduler) Instance() string { return s.instance }
