package scheduler

import (
	"container/heap"
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/scheduler/schedule"
	"github.com/slotd/slotd/tasks"
)

// loop is the one goroutine that owns every slot run on this replica: the
// runs' states, the heap of fire times and the heap of the runs' wake
// times are read and written by it alone, so none of them is locked.
//
// Each turn it handles the events in its mailbox — a claim's reply, a
// notice from a slot's watch, an attempt's end — then the wake times and
// fire times that have come, then sends the claims these asked for as one
// lock.ClaimMany, and waits for the next event, wake time, fire time or
// the end of ctx (shutdown), whichever comes first. Between claims a run
// is only an entry in the wake heap: no goroutine and no timer per slot.
// A goroutine exists per batch of claims in flight and per running
// attempt, and each reports back through the mailbox.
type loop struct {
	s          *Scheduler
	ctx, hard  context.Context
	cancelHard context.CancelCauseFunc

	inbox   mailbox
	current map[string]*Task // the configured tasks by name: a run whose task is not here ends
	fires   fireHeap         // tasks by next fire time, on the store's clock
	wakes   wakeHeap         // waiting, handing-off and settled runs by wake time, on the local clock
	claims  []*run           // runs whose claim goes out at the end of this turn
	// confirms: lagged runs whose slots' states are read at the end of
	// this turn, before any is called missed (confirmMiss).
	confirms []*run
	// unconfirmedUntil: a read of confirms failed; until then the
	// lagged runs are counted missed without one (onConfirmed).
	unconfirmedUntil time.Time
	live             int // runs not ended
	// pending: claims sent and not yet answered. deferred: deferring runs
	// whose wait was extended because claims were pending; they look again
	// soon after none are (releaseDeferred). lastTaken: when the last
	// Taken notice came, for any slot. See prefer.go.
	pending   int
	deferred  []*run
	lastTaken time.Time
	// On a store that reports every release (deferral.go): checks, the
	// deferrals by check time; firing, this turn's; heldChecks, those
	// waiting for this replica's pending claims; byName, every slot they
	// list; peeker, the store that reads them; lastFiring, how many slots
	// the last turn's deferral listed (the next one's room). nil byName:
	// deferring slots are runs.
	checks     checkHeap
	firing     *deferral
	lastFiring int
	heldChecks []*deferral
	spare      [][]deferredSlot // emptied deferrals' lists, for reuse (recycle)
	byName     map[slotName]deferRef
	peeker     lock.Peeker
	tally      tallies // what preferred claimants tell of their claims (tally.go)
	// running: attempts running; capped: runs waiting for room under
	// max_running, longest first (entries no longer capped are skipped).
	// See capacity.go.
	running int
	capped  []*run
	// stopping: ctx has ended; nothing fires, and the loop returns once
	// every run has ended.
	stopping bool
	// paused: the tasks paused as this replica last heard (controller),
	// by name; their slots are skipped when they fire. It holds the
	// paused ones only (setPaused), so that while none is, a fire looks
	// up no name.
	paused map[string]bool
	ctl    *controller // nil: the store has no operator controls
	// backfills: operators' backfills under way here (backfill.go).
	backfills []*backfill

	workers sync.WaitGroup // claim batches and attempts in flight
	ids     idCache        // the slot ids fireDue formatted last
}

// idCache holds the slot id last formatted at each resolution. The tasks
// due at one instant share their id (ten thousand one-second tasks, one
// id), and formatting it was a fired slot's dearest step on a replica
// that leaves the slot to a peer (BenchmarkFireDeferred).
type idCache [schedule.Second + 1]struct {
	sec int64
	id  string
}

// id is s.SlotID(at), formatted once per resolution and instant.
func (c *idCache) id(s *schedule.Schedule, at time.Time) string {
	res := s.Resolution()
	if uint(res) >= uint(len(c)) || at.Nanosecond() != 0 {
		return s.SlotID(at)
	}
	e := &c[res]
	if sec := at.Unix(); e.id == "" || e.sec != sec {
		e.sec, e.id = sec, s.SlotID(at)
	}
	return e.id
}

func newLoop(s *Scheduler, ctx, hard context.Context, cancelHard context.CancelCauseFunc) *loop {
	l := &loop{s: s, ctx: ctx, hard: hard, cancelHard: cancelHard, inbox: newMailbox(), current: map[string]*Task{}}
	list := s.Tasks()
	for i := range list {
		l.current[list[i].Name] = &list[i]
	}
	return l
}

// run is the loop. It returns once ctx has ended and every run has ended
// (running attempts included, cancelled through hard after the grace); it
// does not wait for the workers' goroutines to exit.
func (l *loop) run() {
	stopReleases := l.watchReleases()
	defer stopReleases()
	l.start()
	var (
		shutdown = l.ctx.Done()
		grace    Timer
		graceC   <-chan time.Time
		events   []event
	)
	for {
		l.closeFiring()
		l.sendClaims()
		l.sendConfirms()
		if l.stopping && l.live == 0 {
			break
		}
		var timerC <-chan time.Time
		var timer Timer
		if wait, ok := l.nextWait(); ok {
			timer = l.s.clock.NewTimer(wait)
			timerC = timer.C()
		}
		select {
		case <-l.inbox.ready:
		case <-timerC:
		case <-shutdown:
			shutdown = nil
			l.s.log.Info("shutting down: no new attempts", "grace", l.s.grace)
			l.onShutdown()
			grace = l.s.clock.NewTimer(l.s.grace)
			graceC = grace.C()
		case <-graceC:
			graceC = nil
			l.s.log.Warn("shutdown grace over: cancelling running attempts and releasing their slots")
			l.cancelHard(ErrShutdown)
		}
		if timer != nil {
			timer.Stop()
		}
		events = l.inbox.take(events)
		for i := range events {
			l.handle(events[i])
			events[i] = event{} // no run kept alive by a handled event
		}
		l.releaseDeferred()
		l.releaseChecks()
		l.admit()
		l.wakeDue()
		l.checkDue()
		l.fireDue()
		l.backfillDue()
	}
	if grace != nil {
		grace.Stop()
	}
}

// nextWait is how long the loop may block without missing a wake time or
// a fire time; false: until an event or shutdown.
func (l *loop) nextWait() (time.Duration, bool) {
	var wait time.Duration
	ok := false
	if !l.stopping && len(l.fires) > 0 {
		// Wake at least once per clock check: if the wall clock steps or the
		// measured offset changes, the next fire time is due sooner or later
		// than this wait says.
		wait, ok = min(l.fires[0].due.Sub(l.s.now()), l.s.checkEvery), true
	}
	if len(l.wakes) > 0 {
		w := l.wakes[0].wakeAt.Sub(l.s.clock.Now())
		if !ok || w < wait {
			wait, ok = w, true
		}
	}
	if len(l.checks) > 0 {
		w := l.checks[0].checkAt.Sub(l.s.clock.Now())
		if !ok || w < wait {
			wait, ok = w, true
		}
	}
	return max(wait, 0), ok
}

// handle passes an event from the mailbox to its transition.
func (l *loop) handle(e event) {
	switch e.kind {
	case claimed:
		l.pending--
		l.onClaimReply(e.run, e.reply)
	case noticed:
		l.onNotice(e.run, e.change)
	case attempted:
		l.onAttempted(e.run, e.reply.Claim, e.done, e.entry)
	case controlled:
		l.onControlled(e.task, e.done)
	case triggered:
		l.onTriggered(e.task, e.at)
	case reloaded:
		l.onReload(e.reload)
	case backfilled:
		l.onBackfill(e.backfill)
	case checked:
		l.onChecked(e.deferral, e.states, e.reply.Err, e.done, e.covered)
	case releaseNoticed:
		l.onReleaseNotice(e.name)
	case confirmed:
		l.onConfirmed(e.runs, e.states, e.reply.Err)
	}
}

// start fires, for each task whose catchup is "latest", the slot whose
// window is open now, and fills the fire heap with every task's next fire
// time. A caught-up slot whose start delay (jitter) has not passed yet
// stays in the heap until it has.
func (l *loop) start() {
	now := l.s.now()
	list := l.s.Tasks()
	l.fires = make(fireHeap, 0, len(list))
	for i := range list {
		t := &list[i]
		if t.Catchup == CatchupLatest {
			if slot, ok := t.Schedule.Latest(now); ok && now.Before(t.SlotDeadline(slot)) && l.s.catchUp(t, slot, now) {
				if now.Before(slot.Add(t.StartDelay(slot))) {
					l.fires = append(l.fires, newFire(t, slot))
					continue
				}
				if !l.skipPaused(t, slot) {
					l.onFire(t, slot)
				}
			}
		}
		if next := t.Schedule.Next(now); !next.IsZero() {
			l.fires = append(l.fires, newFire(t, next))
		}
	}
	heap.Init(&l.fires)
}

// fireDue fires every fire time whose start delay (Task.StartDelay) has
// passed: the slot is still the fire time's. A fire time that passed
// while this process was stalled still fires if its window is open; each
// slot is claimed by its own id, so a late start cannot run a slot twice.
func (l *loop) fireDue() {
	if l.stopping {
		return
	}
	now := l.s.now()
	for len(l.fires) > 0 && !l.fires[0].due.After(now) {
		f := l.fires[0]
		// The next fire time is the slot's window end too, when the task
		// sets no deadline: one cron search for both.
		next, following := f.task.Schedule.Step(f.next)
		if !l.skipPaused(f.task, f.next) {
			slot := f.task.slotOf(f.next, following, l.ids.id(f.task.Schedule, f.next))
			if now.Before(slot.Deadline) {
				l.fireSlot(f.task, slot)
			} else {
				l.s.stats.Task(f.task.Name).Missed.Inc()
				l.s.log.Warn("slot missed: its window closed before this replica could fire it",
					"task", f.task.Name, "slot", slot.ID)
				l.failed(slotEnd{t: f.task, slot: slot, kind: tasks.FailureMissed})
			}
		}
		if f.next = next; f.next.IsZero() {
			heap.Pop(&l.fires)
		} else {
			f.setDue(f.next.Add(f.task.StartDelay(f.next)))
			l.fires.fixFirst()
		}
	}
}

// wakeDue passes every run whose wake time has come to onWake.
func (l *loop) wakeDue() {
	now := l.s.clock.Now()
	for len(l.wakes) > 0 && !l.wakes[0].wakeAt.After(now) {
		l.onWake(heap.Pop(&l.wakes).(*run))
	}
}

// schedule sets r's wake time d from now (on the local clock, which is
// monotonic: a wall-clock step does not stretch a wait).
func (l *loop) schedule(r *run, d time.Duration) {
	r.wakeAt = l.s.clock.Now().Add(max(d, 0))
	if r.index >= 0 {
		heap.Fix(&l.wakes, r.index)
		return
	}
	heap.Push(&l.wakes, r)
}

// unschedule removes r's wake time, if it has one.
func (l *loop) unschedule(r *run) {
	if r.index >= 0 {
		heap.Remove(&l.wakes, r.index)
	}
}

// sendClaims sends the claims this turn's events asked for, as one
// lock.ClaimMany, so that ten thousand slots due together cost a few round
// trips and one goroutine; each reply comes back as a claimed event, the
// slots won in the first round trip before the last one is back.
//
// Each replica claims them in its own random order. In the same order
// everywhere, the replica whose first round trip lands first would win
// nearly every slot, and run them all at once while its peers idle; in
// random orders each replica's first round trips win their own share, so
// the work of a burst spreads over the replicas.
func (l *loop) sendClaims() {
	if len(l.claims) == 0 {
		return
	}
	runs := l.claims
	l.claims = nil
	if l.ctx.Err() != nil {
		// Shutting down: a claim sent now could win a slot that no attempt
		// would run, leaving it to its lease.
		for _, r := range runs {
			l.end(r)
		}
		return
	}
	rand.Shuffle(len(runs), func(i, j int) { runs[i], runs[j] = runs[j], runs[i] })
	reqs := make([]lock.ClaimRequest, len(runs))
	lease := runs[0].t.Lease
	for i, r := range runs {
		reqs[i] = lock.ClaimRequest{Slot: r.slot, Owner: l.s.owner, Policy: r.t.Policy}
		lease = min(lease, r.t.Lease)
	}
	store, inbox := l.s.store, &l.inbox
	l.pending += len(runs)
	l.workers.Add(1)
	go func() {
		defer l.workers.Done()
		cctx, cancel := context.WithTimeout(l.ctx, lease/3)
		defer cancel()
		if len(reqs) == 1 {
			var reply lock.ClaimReply
			reply.Claim, reply.Err = store.Claim(cctx, reqs[0].Slot, reqs[0].Owner, reqs[0].Policy)
			inbox.post(event{kind: claimed, run: runs[0], reply: reply})
			return
		}
		lock.ClaimMany(cctx, store, reqs, func(i int, reply lock.ClaimReply) {
			inbox.post(event{kind: claimed, run: runs[i], reply: reply})
		})
	}()
}

// eventKind is what an event reports.
type eventKind uint8

const (
	claimed        eventKind = iota + 1 // a claim's reply
	noticed                             // the slot's watch: change says what
	attempted                           // an attempt ended; with done, the replica is finished with the slot
	controlled                          // the task was paused (with done) or resumed, by the controller
	triggered                           // an operator's trigger of the task at at, armed, by the controller
	reloaded                            // Reload's new tasks
	backfilled                          // an operator's backfill request (backfill.go); run is nil
	checked                             // a deferral's read (deferral.go): states, or reply.Err; run is nil
	confirmed                           // the read of lagged runs' slots (confirmMiss): runs, states, or reply.Err; run is nil
	releaseNoticed                      // a release of the slot name names (deferral.go); run is nil
)

// event is a message to the loop about one run.
type event struct {
	kind   eventKind
	run    *run
	reply  lock.ClaimReply // claimed: the reply; attempted: the claim the attempt ran under; checked: the read's error
	change lock.Change     // noticed: what the watch reported
	done   bool            // attempted: the replica is finished with the slot; controlled: paused; checked: no slot read, all wait for the deferral's limit
	task   *Task           // controlled, triggered: the task as the controller read it (the loop looks its name up)
	at     time.Time       // triggered: the trigger's time
	// reload: reloaded's tasks and answer; run is nil.
	reload *reload
	// backfill: backfilled's request.
	backfill *backfill
	// entry: attempted, when the attempt failed: its history entry.
	entry *HistoryEntry
	// deferral and states: checked's deferral and what the read said;
	// covered: none was read, as their claimants' tallies cover them all.
	deferral *deferral
	states   []lock.State
	covered  bool
	// runs: confirmed's runs, in the order of states.
	runs []*run
	// name: releaseNoticed's slot.
	name slotName
}

// mailbox is the loop's queue of events. It does not block a sender: a
// slot's watch posts from the store's notification goroutine while it
// holds the store's lock, and the loop itself calls the store.
type mailbox struct {
	mu     sync.Mutex
	events []event
	ready  chan struct{} // holds a token once an event is posted
}

func newMailbox() mailbox { return mailbox{ready: make(chan struct{}, 1)} }

// post queues e and wakes the loop.
func (m *mailbox) post(e event) {
	m.mu.Lock()
	m.events = append(m.events, e)
	m.mu.Unlock()
	select {
	case m.ready <- struct{}{}:
	default:
	}
}

// take returns the queued events, and keeps buf (emptied) for the next.
func (m *mailbox) take(buf []event) []event {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := m.events
	m.events = buf[:0]
	return out
}

// fire is one task in the fire heap.
type fire struct {
	task *Task
	next time.Time // the slot time
	due  time.Time // when it fires: next plus the task's start delay for it
	// sec, nsec: due's, for the heap's comparisons (setDue).
	sec  int64
	nsec int32
}

func newFire(t *Task, next time.Time) *fire {
	f := &fire{task: t, next: next}
	f.setDue(next.Add(t.StartDelay(next)))
	return f
}

// setDue sets when f fires.
func (f *fire) setDue(due time.Time) { f.due, f.sec, f.nsec = due, due.Unix(), int32(due.Nanosecond()) }

// before reports whether f is due before g.
func (f *fire) before(g *fire) bool { return f.sec < g.sec || f.sec == g.sec && f.nsec < g.nsec }

// fireHeap orders tasks by when their next fire is due.
type fireHeap []*fire

// fixFirst is heap.Fix(&h, 0) after the first fire's due time changed,
// which leaves it the earliest or moves it down; without an interface
// call per comparison, a tenth of a deferred slot's cost on the fire path
// when ten thousand tasks fire together (BenchmarkFireDeferred).
func (h fireHeap) fixFirst() {
	f, i := h[0], 0
	for {
		c := 2*i + 1
		if c >= len(h) {
			break
		}
		if r := c + 1; r < len(h) && h[r].before(h[c]) {
			c = r
		}
		if !h[c].before(f) {
			break
		}
		h[i] = h[c]
		i = c
	}
	h[i] = f
}

func (h fireHeap) Len() int           { return len(h) }
func (h fireHeap) Less(i, j int) bool { return h[i].before(h[j]) }
func (h fireHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *fireHeap) Push(x any)        { *h = append(*h, x.(*fire)) }
func (h *fireHeap) Pop() any {
	old := *h
	f := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return f
}

// wakeHeap orders runs by wake time; each run knows its index.
type wakeHeap []*run

func (h wakeHeap) Len() int           { return len(h) }
func (h wakeHeap) Less(i, j int) bool { return h[i].wakeAt.Before(h[j].wakeAt) }
func (h wakeHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *wakeHeap) Push(x any) {
	r := x.(*run)
	r.index = len(*h)
	*h = append(*h, r)
}
func (h *wakeHeap) Pop() any {
	old := *h
	r := old[len(old)-1]
	old[len(old)-1] = nil
	r.index = -1
	*h = old[:len(old)-1]
	return r
}

// appendCompacted appends x to list, a list whose entries leave it (keep
// reports false) while it waits to be walked: a full list first drops
// them, and one that keeps more than half grows to twice what it kept, so
// that the next compaction comes after as many appends as it walks (a
// compaction at each append, while entries leave as fast as new ones
// come, would walk the whole list each time).
func appendCompacted[T any](list []T, x T, keep func(T) bool) []T {
	if len(list) == cap(list) && len(list) > 0 {
		kept := slices.DeleteFunc(list, func(e T) bool { return !keep(e) })
		if len(kept) > cap(list)/2 {
			kept = slices.Grow(kept, len(kept))
		}
		list = kept
	}
	return append(list, x)
}
