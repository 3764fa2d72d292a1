package scheduler

import (
	"errors"
	"log/slog"
	"strconv"
	"time"

	"github.com/slotd/slotd/internal/stats"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/redislock"
	"github.com/slotd/slotd/tasks"
)

// runState is the phase of a slot's life on this replica.
type runState uint8

const (
	// deferring: fired on a replica that is not the slot's preferred
	// claimant (prefer.go): waits preferWait for a notice that the slot
	// was taken (then waits as if held), done (settled) or released, and
	// claims if none came.
	deferring runState = iota + 1
	// claiming: a claim is queued for this turn's batch or in flight; its
	// reply comes as a claimed event.
	claiming
	// running: this replica won the claim and its attempt runs; its end
	// comes as an attempted event.
	running
	// handingOff: paused after this replica's own failed attempt, so that
	// a woken peer goes first. A release notice then is (or may be) this
	// replica's own, published as it released: it does not cut the pause
	// short. A completion settles the run.
	handingOff
	// waiting: until its wake time (the holder's lease, the slot time, the
	// backoff after an error) or a release notice, then claims again; a
	// completion notice settles it without a claim.
	waiting
	// settled: the slot is done or out of attempts; the run waits only for
	// an operator's rerun, until a little after its deadline.
	settled
	// capped: about to claim while the replica is at max_running; waits
	// for room (capacity.go), a peer's claim or the slot's completion.
	capped
	// ended: its watch is stopped; later events about it are ignored.
	ended
)

func (s runState) String() string {
	names := [...]string{"none", "deferring", "claiming", "running", "handingOff", "waiting", "settled", "capped", "ended"}
	if int(s) < len(names) {
		return names[s]
	}
	return "runState(" + strconv.Itoa(int(s)) + ")"
}

// notice is what a slot's watch said while its run was claiming or
// running, kept for when the claim or attempt is over. The latest wins: a
// rerun after a completion means claim again, a completion after a
// release means settled.
type notice uint8

const (
	noNotice notice = iota
	released        // released after a failure, or rerun by an operator: claim again
	done            // marked done by its holder: settled, no claim needed
)

// expireLag is how long after their deadline settled runs are ended. A
// deadline is by default the next fire time, when the replica is busiest
// claiming the next slots; ending the old runs, which wait only for a rerun
// that can no longer start, is not urgent. A rerun announced in the lag
// wakes its run, which then finds the window closed and ends.
const expireLag = time.Second

// run is one slot's life on this replica, from its fire time to its
// deadline: claim, run if won, and otherwise wait until the slot is
// released, its holder's lease runs out, or it is settled (done or out of
// attempts) and then only for an operator's rerun until the deadline.
// Every field is the loop's; the methods of loop named on* are its
// transitions, one per event.
type run struct {
	t    *Task
	slot lock.Slot
	w    *lock.Watch

	state    runState
	news     notice      // while claiming or running
	last     lock.Result // of the latest claim answered
	failures int         // claims in a row that got no answer
	backoff  bool        // the latest claim answered: a failed attempt's retry backoff holds the slot
	reported bool        // its slot's end without a success went to failed (notify.go)
	backfill bool        // an operator's backfill started it (backfill.go): it ends when settled
	// deferUntil: while deferring, when the claim goes out whatever this
	// replica is still waiting for (see loop.keepDeferring).
	deferUntil time.Time
	wakeAt     time.Time // in the wake heap: when onWake is due
	listed     bool      // in the loop's capped list (capacity.go)
	lagged     bool      // its window closed unsettled: it waits missLag for news on its way
	asked      bool      // lagged, no news in missLag: its slot's state is read before it is called missed (confirmMiss)
	tallied    bool      // its claim's answer goes to this replica's tally (tally.go)
	index      int       // in the wake heap; -1 if not in it
	log        *slog.Logger
}

// onFire starts the run of task t's slot that fires at at: it watches the
// slot, so that a release that follows the first claim is seen, and
// queues the claim, or defers it if this replica is not the slot's
// preferred claimant.
func (l *loop) onFire(t *Task, at time.Time) { l.fireSlot(t, t.Slot(at)) }

// fireSlot is onFire of slot, one of t's.
func (l *loop) fireSlot(t *Task, slot lock.Slot) {
	by, mine := l.s.claimant(slot)
	if mine {
		r := l.newClaimRun(t, slot)
		if l.tally.tallier != nil && by != "" {
			r.tallied = true
			l.tallySent(slot)
		}
		l.advance(r, false)
		return
	}
	if l.byName != nil {
		l.deferSlot(t, slot, by)
		return
	}
	r := l.newSlotRun(t, slot)
	r.state = deferring
	limit := deferLimit(r.slot)
	r.deferUntil = l.s.clock.Now().Add(limit)
	l.schedule(r, min(preferWait, limit))
}

// onTriggered starts the run of an operator's trigger of t at at: a slot
// of its own (Task.TriggerSlot), claimed as a fired slot is, whether or
// not the task is paused (a trigger is an operator's explicit ask). The
// controller passes each trigger on once.
func (l *loop) onTriggered(read *Task, at time.Time) {
	t := l.current[read.Name]
	if l.stopping || t == nil { // removed by a reload since the controller read it
		return
	}
	r := l.newClaimRun(t, t.TriggerSlot(at))
	r.logger(l.s).Info("triggered by an operator: claiming")
	l.advance(r, false)
}

// onControlled records that t was paused or resumed. Runs already under
// way go on: a paused task only fires no new slot (skipPaused).
func (l *loop) onControlled(t *Task, paused bool) {
	if l.current[t.Name] == nil || l.paused[t.Name] == paused {
		return
	}
	l.setPaused(t.Name, paused)
	l.s.stats.Task(t.Name).Paused.Store(paused)
	msg := "task resumed: its slots fire again from the next fire time"
	if paused {
		msg = "task paused: its slots are skipped until it is resumed"
	}
	l.s.log.Info(msg, "task", t.Name)
}

// setPaused records whether the task named name is paused.
func (l *loop) setPaused(name string, paused bool) {
	if paused {
		l.paused[name] = true
	} else {
		delete(l.paused, name)
	}
}

// skipPaused reports whether t's slot at at is skipped because t is
// paused, and counts and logs it if so: skipped, not missed.
func (l *loop) skipPaused(t *Task, at time.Time) bool {
	if !l.paused[t.Name] {
		return false
	}
	l.s.stats.Task(t.Name).Skip(stats.SkipPaused)
	l.s.log.Info("slot skipped: the task is paused", "task", t.Name, "slot", t.Schedule.SlotID(at))
	return true
}

// newRun makes the run of t's slot at at and starts watching the slot.
func (l *loop) newRun(t *Task, at time.Time) *run { return l.newSlotRun(t, t.Slot(at)) }

// newSlotRun makes the run of slot, one of t's, and starts watching it.
func (l *loop) newSlotRun(t *Task, slot lock.Slot) *run {
	return l.watchRun(t, slot, l.s.store.Watch(slot))
}

// claimWatcher is a store whose watch of a slot this replica claims at
// once can be armed by the slot's claims instead of at once (zklock: every
// change of an armed slot costs the ensemble a request per watching
// replica, and a claimant hears its own claim's result).
type claimWatcher interface {
	WatchClaims(slot lock.Slot) *lock.Watch
}

// newClaimRun makes the run of slot, one of t's, that claims at once (its
// preferred claimant's, a trigger's, a backfill's), watched as the store
// allows for such a run. A run at max_running would not claim: it waits
// capped for a peer's notices, so it watches at once.
func (l *loop) newClaimRun(t *Task, slot lock.Slot) *run {
	if cw, ok := l.s.store.(claimWatcher); ok && !l.atCapacity() {
		return l.watchRun(t, slot, cw.WatchClaims(slot))
	}
	return l.newSlotRun(t, slot)
}

// watchRun makes the run of slot, one of t's, watched by w.
func (l *loop) watchRun(t *Task, slot lock.Slot, w *lock.Watch) *run {
	r := &run{t: t, slot: slot, index: -1, w: w}
	inbox := &l.inbox
	r.w.OnChange(func(c lock.Change) { inbox.post(event{kind: noticed, run: r, change: c}) })
	l.live++
	return r
}

// onClaimReply acts on the reply to r's claim: runs the attempt if won,
// else waits or settles as the reply says.
func (l *loop) onClaimReply(r *run, reply lock.ClaimReply) {
	if r.tallied {
		r.tallied = false
		c := reply.Claim.Result
		l.tallyAnswered(r.slot, reply.Err == nil && (c == lock.Won || c == lock.Held || c == lock.Done))
	}
	// A reply that comes after the deadline is read before the slot is
	// judged: a peer that holds the slot reports for itself, and one that
	// finished or exhausted it settled it; only the others are missed.
	switch c := reply.Claim; {
	case reply.Err == nil && (c.Result == lock.Held || c.Result == lock.Done || c.Result == lock.Exhausted):
	case l.over(r, false):
		return
	}
	s, c, err := l.s, reply.Claim, reply.Err
	st := s.stats.Task(r.t.Name)
	r.last = c.Result
	s.noteWrite("claim", err)
	if err != nil {
		st.ClaimFailed()
		wait := s.claimRetry(err, r.failures)
		r.failures++
		switch {
		case l.ctx.Err() != nil:
		case errors.Is(err, lock.ErrForeign):
			// Somebody else's data: never overwrite it, never run over it.
			r.logger(s).Error("slot keys hold a value slotd did not write; not running the slot, leaving the keys alone",
				"err", err, "retry_in", wait)
		default:
			r.logger(s).Warn("claim failed; not running, will retry", "err", err, "retry_in", wait)
		}
		l.park(r, waiting, wait)
		return
	}
	r.failures = 0
	r.backoff = c.Backoff
	st.Claimed(c.Result)
	switch c.Result {
	case lock.Won:
		r.state = running
		l.startAttempt(r, c)
	case lock.Done, lock.Exhausted:
		if s.log.Enabled(l.ctx, slog.LevelDebug) {
			r.logger(s).Debug("slot settled", "result", c.Result, "holder", c.Holder, "attempt", r.slot.ShownAttempt(c.Attempt))
		}
		if c.Result == lock.Exhausted {
			l.runFailed(r, slotEnd{kind: tasks.FailureExhausted, attempt: c.Attempt, attempts: c.Attempt - c.Base})
		}
		l.park(r, settled, 0)
	case lock.Late:
		// The store's clock says the window closed (ours may lag a
		// little), or a retry backoff ends at or after it.
		l.missed(r)
		l.park(r, settled, 0)
	case lock.Held:
		// Woken early by a release; otherwise try when the lease would run
		// out, with a little jitter so watchers do not stampede.
		l.park(r, waiting, c.Wait+s.handoff.Delay(0))
	case lock.Early:
		l.park(r, waiting, c.Wait)
	default:
		l.park(r, waiting, s.backoff.Delay(0))
	}
}

// onAttempted acts on the end of r's attempt under claim c; finished: the
// task succeeded, even if the slot could not then be marked done, since
// running it again here would only add a duplicate (a peer may still,
// after the lease); entry: the failed attempt's history entry.
func (l *loop) onAttempted(r *run, c lock.Claim, finished bool, entry *HistoryEntry) {
	l.attemptEnded()
	if finished {
		l.park(r, settled, 0)
		return
	}
	if entry != nil && entry.Outcome == stats.OutcomeMissedQueue {
		// It waited for its task's running slot past its window; marked
		// done, so no peer saw it missed: counted and reported here, once.
		st := l.s.stats.Task(r.t.Name)
		st.Missed.Inc()
		st.MissedQueue.Inc()
		l.runFailed(r, slotEnd{kind: tasks.FailureMissed, reason: tasks.ReasonQueue, attempt: c.Attempt, attempts: c.Attempt - c.Base, own: entry})
		l.park(r, settled, 0)
		return
	}
	if c.Attempt-c.Base >= r.t.MaxAttempts {
		l.s.stats.Task(r.t.Name).Exhausted.Inc()
		r.logger(l.s).Error("slot exhausted: its last allowed attempt failed", "attempts", c.Attempt-c.Base)
		l.runFailed(r, slotEnd{kind: tasks.FailureExhausted, attempt: c.Attempt, attempts: c.Attempt - c.Base, own: entry})
		l.park(r, settled, 0)
		return
	}
	// Let a peer go first: our own release's notice, which may have come
	// already or may come later, must not wake us.
	r.news = noNotice
	l.park(r, handingOff, l.s.handoff.Delay(0))
}

// onNotice acts on the slot's watch: a release (or an operator's rerun),
// its completion by the holder, or a won claim of it.
func (l *loop) onNotice(r *run, c lock.Change) {
	if c == lock.Taken {
		l.lastTaken = l.s.clock.Now()
		// Only a run that has not claimed yet acts on it, or one whose
		// window has closed unsettled (lagged): the claim's reply tells
		// the others more, and the notice may be stale.
		if r.state == deferring || r.state == capped || r.lagged {
			l.uncap(r)
			// As a Held claim would: wait for the holder's lease, or for
			// its release or completion.
			r.last = lock.Held
			l.unschedule(r)
			l.park(r, waiting, takenWait(r.t.Lease))
		}
		return
	}
	isDone := c == lock.Completed
	switch r.state {
	case deferring:
		l.unschedule(r)
		l.advance(r, isDone)
	case claiming, running:
		r.news = released
		if isDone {
			r.news = done
		}
	case capped:
		// A completion settles it; a release leaves it waiting for room.
		if isDone {
			l.uncap(r)
			l.unschedule(r)
			l.advance(r, true)
		}
	case handingOff:
		// A release is our own, most likely; another (a peer's, a rerun)
		// waits for the pause to end, which is short.
		if isDone {
			l.unschedule(r)
			l.advance(r, true)
		}
	case waiting:
		// A completion settles the run as a claim would find it, without
		// the claim: that is how the replicas that lost a burst's slots
		// hear of each, ten thousand at once.
		l.unschedule(r)
		l.advance(r, isDone)
	case settled:
		// A completion changes nothing; a rerun means claim again.
		if !isDone {
			l.unschedule(r)
			r.news = released
			l.advance(r, true)
		}
	}
}

// onWake acts on r's wake time: the end of a wait or of the handoff
// pause (claim again), or a settled run's deadline (end).
func (l *loop) onWake(r *run) {
	switch r.state {
	case deferring:
		if l.keepDeferring(r) {
			return
		}
		l.advance(r, false)
	case waiting, handingOff:
		l.advance(r, false)
	case capped:
		// Its window has closed (else a wake comes early: claim if there
		// is room, else wait on).
		l.advance(r, false)
	case settled:
		l.advance(r, true)
	}
}

// onShutdown ends every run that waits, hands off or is settled. A run
// claiming or running ends at its claim's reply or its attempt's end.
func (l *loop) onShutdown() {
	l.stopping = true
	l.dropChecks()
	for len(l.wakes) > 0 {
		l.end(l.wakes[len(l.wakes)-1])
	}
}

// advance moves r, which is not claiming or running, on from what it
// knows now — isSettled, and the news kept while it was busy: it ends if
// ctx has ended, the window has closed or a reload removed its task,
// settles, or queues a claim.
func (l *loop) advance(r *run, isSettled bool) {
	if l.over(r, isSettled) {
		return
	}
	if l.removed(r) {
		// A reload removed the task: it claims nothing more.
		l.end(r)
		return
	}
	switch r.news {
	case released:
		isSettled = false // a release, or a rerun of a settled slot: claim again
	case done:
		isSettled = true // as a claim would find it, without the claim
	}
	r.news = noNotice
	if isSettled && r.backfill {
		l.end(r) // no rerun to wait for: its backfill admits the next slot
		return
	}
	if isSettled {
		r.state = settled
		l.schedule(r, r.slot.Deadline.Sub(l.s.now())+expireLag)
		return
	}
	if l.atCapacity() {
		if r.state != capped {
			l.capRun(r)
		} else {
			l.schedule(r, r.slot.Deadline.Sub(l.s.now()))
		}
		return
	}
	l.uncap(r)
	r.state = claiming
	l.claims = append(l.claims, r)
}

// park puts r, after its claim or attempt, into state (waiting,
// handingOff or settled), waking after wait unless settled. News that
// came meanwhile, or the end of ctx, is acted on at once instead.
func (l *loop) park(r *run, state runState, wait time.Duration) {
	if r.news != noNotice || l.ctx.Err() != nil || state == settled {
		l.advance(r, state == settled)
		return
	}
	r.state = state
	l.schedule(r, min(wait, r.slot.Deadline.Sub(l.s.now())))
}

// over ends r if ctx has ended or the slot's window has closed, and
// reports whether it did.
func (l *loop) over(r *run, isSettled bool) bool {
	if l.ctx.Err() != nil {
		l.end(r)
		return true
	}
	if !l.s.now().Before(r.slot.Deadline) {
		// A holder still running past the deadline reports for itself.
		if !isSettled && r.last != lock.Held {
			if !r.lagged {
				// A peer's claim or completion just before the deadline
				// may still be on its way: hear it before calling the slot
				// missed. Nothing is claimed meanwhile.
				// A capped run stays capped (its reason); any other, a
				// claim's late reply included, waits.
				r.lagged = true
				if r.state != capped {
					r.state = waiting
				}
				l.schedule(r, missLag)
				return true
			}
			// No news in missLag: the store's answer decides
			// (onConfirmed), and until it comes nothing else does —
			// unless such a read failed lately: then it is not asked.
			if r.asked {
				return true
			}
			if !l.s.clock.Now().Before(l.unconfirmedUntil) {
				l.confirmMiss(r)
				return true
			}
			l.missed(r)
		}
		l.uncap(r)
		l.end(r)
		return true
	}
	return false
}

// end finishes r: it stops watching the slot and leaves the wake heap.
func (l *loop) end(r *run) {
	l.unschedule(r)
	r.w.Stop()
	r.state = ended
	l.live--
}

// logger is r's logger, made on first use: most slots never log.
func (r *run) logger(s *Scheduler) *slog.Logger {
	if r.log == nil {
		r.log = s.log.With("task", r.t.Name, "slot", r.slot.ID)
	}
	return r.log
}

// claimRetry is the wait before claiming again after the failures-th
// failed claim in a row. After a Redlock round without a quorum (a split
// vote, or too few nodes answered) it is random from the first retry on —
// Redlock's random delay, so that contenders that split one round do not
// collide again in the next; Backoff.Delay(0) alone would be exactly Min.
func (s *Scheduler) claimRetry(err error, failures int) time.Duration {
	if errors.Is(err, redislock.ErrNoQuorum) {
		return s.backoff.Delay(failures + 1)
	}
	return s.backoff.Delay(failures)
}
