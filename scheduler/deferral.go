package scheduler

import (
	"container/heap"
	"context"
	"errors"
	"slices"
	"time"

	"github.com/slotd/slotd/lock"
)

// Deferrals. On a store that reports every slot's releases to one function
// (lock.Peeker), a replica keeps no run, watch or timer for a slot
// it leaves to its preferred claimant (prefer.go): the slots it fired in
// one turn and did not claim are one deferral, a list in a heap of check
// times. When the deferral's wait is over (preferWait, longer while this
// replica's own claims are pending, within deferLimit) one lock.Store.States
// read of all of its slots says what became of them:
//
//	done                        listed until its deadline, unread: only an operator's rerun wakes it
//	held, lease ends in time    read again when the lease read runs out (a takeover of a dead holder's slot)
//	held past the deadline      listed unread until the deadline: the holder reports for itself, or releases
//	held, lease outlasts window as held past the deadline, its lease not even read (leaseOutlasts)
//	free, before the limit      read again at the limit (its claimant's claim may be late)
//	anything else               a run claims it (free at the limit, a retry backoff, exhausted, foreign, unreadable)
//
// A release of a listed slot (a failed attempt's, an operator's rerun)
// starts its run at once, as a watch's notice started a deferring run's
// claim: the failure handoff is as prompt as it was. Completions and won
// claims are not listened to: the read says as much, for thousands of
// slots in one round trip, where a notice per slot cost every replica a
// mailbox event, a watch and a run. On a store that keeps tallies (tally.go)
// the read skips the slots whose preferred claimant's tally covers them:
// they read held. On a store without the capability
// (Redlock, which has no preferred claimant anyway) a deferring slot is a
// run as before.

// slotName names a slot in a release notice: its task and id.
type slotName struct{ task, id string }

// deferral is slots this replica left to their preferred claimants,
// read together once checkAt comes.
type deferral struct {
	slots   []deferredSlot
	start   time.Time // local clock: when its first slot was listed
	checkAt time.Time // local clock: the read goes out then (or when releaseDeferred says)
	// until: the read goes out then even while claims are pending; a
	// recheck of held slots does not wait for claims.
	until time.Time
	index int // in the loop's check heap; -1 while being read or done
	// final: a slot read free is claimed, not looked at again at until.
	final bool
	// gone counts its slots a release started a run of (deferredSlot.gone):
	// a burst of failures releases thousands of one deferral's slots, and
	// asking at each whether all are gone must not walk them.
	gone int
	// settled: its slots were read done, or held by a lease that outlasts
	// their window. It is never read: it keeps them listed until checkAt,
	// the latest of their deadlines, so that a release of one (an
	// operator's rerun, whoever ran it; its holder's failure or shutdown)
	// is heard and claimed here (a release notice of a slot no longer
	// listed is ignored).
	settled bool
}

// deferredSlot is one slot of a deferral.
type deferredSlot struct {
	t    *Task
	slot lock.Slot
	by   string // its preferred claimant, if this replica keeps tallies
	// outlasts: leaseOutlasts(t, slot), as it was when listed. The slot,
	// the task and this do not change once listed (a read's goroutine
	// reads them); gone is the loop's.
	outlasts bool
	gone     bool // a release started its run meanwhile
}

// deferRef is where a listed slot is: its deferral and its index there.
type deferRef struct {
	d *deferral
	i int
}

// leaseOutlasts reports whether any lease of slot, one of t's, surely
// lasts until its deadline, so that a read of the slot held needs no TTL
// (on Redis, a PTTL per slot and deferring replica, the bulk of a
// fleet's per-slot commands as it grows). A claim wins no sooner than
// slot.Time − Tolerance by the store's clock and holds for the Lease from
// then; renewals only extend it. A tenth of the lease is kept spare: a
// store may count the lease from a little before its claim's clock check
// (etcd's keepalive beside the claim; milliseconds rounded down).
//
// The lease is this replica's reading of t: a holder on another config (a
// reload in flight, a fleet mid-rollout) may hold a shorter one. Then a
// dead holder's slot is not taken over by this replica before its
// deadline (its peers of the holder's config still read the TTL; a release
// is heard either way): a cost in liveness only. Claims are the store's,
// so no reading of a lease here can make two attempts run at once.
func leaseOutlasts(t *Task, slot lock.Slot) bool {
	return !slot.Time.Add(-t.Tolerance).Add(t.Lease - t.Lease/10).Before(slot.Deadline)
}

// recheckAfter is how long after a holder's lease would run out, as the
// read said, the slot is read again: its store has let it go by then.
const recheckAfter = 5 * time.Millisecond

// recheckSpan groups the held slots of one read whose leases end within
// it into one recheck, at the earliest of them.
const recheckSpan = 50 * time.Millisecond

// watchReleases starts hearing the store's releases, if it can report
// them all (lock.Peeker): deferrals are batched from then on. The
// returned stop is for the loop's end.
func (l *loop) watchReleases() (stop func()) {
	pk, ok := l.s.store.(lock.Peeker)
	if !ok {
		return func() {}
	}
	l.byName, l.peeker = map[slotName]deferRef{}, pk
	l.startTallies()
	inbox := &l.inbox
	return pk.WatchReleases(func(task, id string) {
		inbox.post(event{kind: releaseNoticed, name: slotName{task, id}})
	})
}

// deferSlot lists slot, one of t's, in this turn's deferral; by is its
// preferred claimant.
func (l *loop) deferSlot(t *Task, slot lock.Slot, by string) {
	name := slotName{slot.Task, slot.ID}
	if _, dup := l.byName[name]; dup {
		return
	}
	if l.tally.tallier == nil {
		by = ""
	} else if !l.tallyDeferred(slot, by) {
		l.advance(l.newSlotRun(t, slot), false) // its release was heard already
		return
	}
	limit := deferLimit(slot)
	d := l.firing
	if d == nil {
		now := l.s.clock.Now()
		d = &deferral{index: -1, start: now, checkAt: now.Add(min(preferWait, limit)), until: now.Add(limit),
			slots: l.newList(l.lastFiring)}
		l.firing = d
	} else if until := d.start.Add(limit); until.Before(d.until) {
		d.until = until
		if d.checkAt.After(until) {
			d.checkAt = until
		}
	}
	l.byName[name] = deferRef{d: d, i: len(d.slots)}
	d.slots = append(d.slots, deferredSlot{t: t, slot: slot, by: by, outlasts: leaseOutlasts(t, slot)})
}

// closeFiring puts this turn's deferral into the check heap.
func (l *loop) closeFiring() {
	if d := l.firing; d != nil {
		l.firing, l.lastFiring = nil, len(d.slots)
		heap.Push(&l.checks, d)
	}
	if l.tally.tallier != nil {
		l.pruneTallies(l.s.clock.Now(), false)
	}
}

// checkDue sends the read of every deferral whose check time has come,
// unless this replica's own claims are pending and its limit has not
// come: then it waits for releaseDeferred, or its limit.
func (l *loop) checkDue() {
	now := l.s.clock.Now()
	for len(l.checks) > 0 && !l.checks[0].checkAt.After(now) {
		d := l.checks[0]
		if d.settled { // their windows have closed: nothing to rerun
			heap.Pop(&l.checks)
			l.unlist(d)
			continue
		}
		if l.pending > 0 && now.Before(d.until) {
			d.checkAt = d.until
			heap.Fix(&l.checks, 0)
			// Under sustained load claims may be pending at every turn:
			// the deferrals read meanwhile leave the list as it grows.
			l.heldChecks = appendCompacted(l.heldChecks, d, func(x *deferral) bool { return x.index >= 0 })
			continue
		}
		heap.Pop(&l.checks)
		l.read(d)
	}
}

// releaseChecks has the held-back deferrals read preferWait from now once
// no claim of this replica is pending (as releaseDeferred does for runs).
func (l *loop) releaseChecks() {
	if l.pending > 0 || len(l.heldChecks) == 0 {
		return
	}
	soon := l.s.clock.Now().Add(preferWait)
	for i, d := range l.heldChecks {
		if d.index >= 0 && d.checkAt.After(soon) {
			d.checkAt = soon
			heap.Fix(&l.checks, d.index)
		}
		l.heldChecks[i] = nil
	}
	l.heldChecks = l.heldChecks[:0]
}

// read sends one Peek of d's slots (those a release started a run of
// included: they are few, and the answer's order stays d's), but for
// those their claimants' tallies cover (tally.go), which read as held;
// its answer comes as a checked event.
func (l *loop) read(d *deferral) {
	if allGone(d) {
		return
	}
	lease := d.slots[0].t.Lease
	for _, x := range d.slots {
		lease = min(lease, x.t.Lease)
	}
	listed := d.slots
	asks := l.tallyAsks(d)
	// Before its limit, a slot whose claimant's tally is not in yet reads
	// free, unread: it is looked at again at the limit, as a free one is.
	later := !d.final && l.s.clock.Now().Add(tallyLater).Before(d.until)
	var asked, gone []bool
	if len(asks) > 0 {
		asked, gone = make([]bool, len(d.slots)), make([]bool, len(d.slots))
		for _, a := range asks {
			for _, i := range a.slots {
				asked[i] = true
			}
		}
		for i, x := range d.slots {
			gone[i] = x.gone
		}
	}
	pk, tl, inbox := l.peeker, l.tally.tallier, &l.inbox
	l.workers.Add(1)
	go func() {
		defer l.workers.Done()
		cctx, cancel := context.WithTimeout(l.ctx, lease/3)
		defer cancel()
		// peek reads the listed slots at idx (all if nil), asking the
		// TTLs of those whose lease may end within their window.
		peek := func(idx []int) ([]lock.State, error) {
			n := len(listed)
			if idx != nil {
				n = len(idx)
			}
			slots, ttl := make([]lock.Slot, n), make([]bool, n)
			for j := range n {
				i := j
				if idx != nil {
					i = idx[j]
				}
				slots[j], ttl[j] = listed[i].slot, !listed[i].outlasts
			}
			return pk.Peek(cctx, slots, ttl)
		}
		if len(asks) == 0 {
			states, err := peek(nil)
			inbox.post(event{kind: checked, deferral: d, states: states, reply: lock.ClaimReply{Err: err}})
			return
		}
		covered := readTallies(cctx, tl, asks, len(listed))
		var rest []int
		waiting := 0
		for i := range listed {
			switch {
			case gone[i] || covered[i]: // gone: a release started its run; not read
			case later && asked[i]:
				waiting++
			default:
				rest = append(rest, i)
			}
		}
		if waiting == 0 && len(rest) == 0 {
			// The common case: every slot held by its claimant, as its
			// tally says. No state is made per slot for it.
			inbox.post(event{kind: checked, deferral: d, covered: true})
			return
		}
		if waiting > 0 && len(rest) == 0 {
			// A tally not in yet, and nothing else to read: the whole
			// deferral waits for its limit, listed where it is, and its
			// tallies are read again then (one read per fire time). With
			// a dozen claimants some tallies are in and some are not at
			// the first look; settling the covered slots now would move
			// each to another deferral, an entry's cost per slot.
			inbox.post(event{kind: checked, deferral: d, done: true})
			return
		}
		states := make([]lock.State, len(listed))
		for i := range listed {
			if covered[i] {
				states[i].Status = "running"
			} else if later && asked[i] {
				states[i].Status = "free"
			}
		}
		if len(rest) > 0 {
			sts, err := peek(rest)
			if err != nil || len(sts) != len(rest) {
				inbox.post(event{kind: checked, deferral: d, states: sts, reply: lock.ClaimReply{Err: err}})
				return
			}
			for j, i := range rest {
				states[i] = sts[j]
			}
		}
		inbox.post(event{kind: checked, deferral: d, states: states})
	}()
}

// onChecked acts on the read of d's slots: states in their order, or nil
// with err if the store could not answer, and then every slot is claimed
// (each claim retries as a run's does).
//
// covered: nothing was read, as every slot's claimant's tally covers it;
// each is held past its window (its lease outlasts the window).
func (l *loop) onChecked(d *deferral, states []lock.State, err error, later, covered bool) {
	if l.stopping {
		l.unlist(d)
		return
	}
	if later {
		// None of its slots was read, and a tally that would cover some
		// was not in yet: all are looked at again at its limit, listed
		// where they are.
		if allGone(d) {
			return
		}
		d.final, d.checkAt = true, d.until
		heap.Push(&l.checks, d)
		return
	}
	now, storeNow := l.s.clock.Now(), l.s.now()
	if covered {
		if l.settleWhole(d, nil, now, storeNow) {
			return
		}
		states = make([]lock.State, len(d.slots))
		for i := range states {
			states[i].Status = "running"
		}
	}
	if len(states) != len(d.slots) {
		if err == nil { // cannot happen: every store answers each slot
			err = errors.New("lock: a States read answered for another number of slots")
		}
		l.s.log.Warn("reading the states of slots left to their preferred claimants failed; claiming them",
			"slots", len(d.slots), "err", err)
		states = nil
	}
	if states != nil && !covered && l.settleWhole(d, states, now, storeNow) {
		return
	}
	type held struct {
		x   deferredSlot
		ttl time.Duration
	}
	var holds []held
	var again *deferral   // the slots read free before the limit: looked at again then
	var settled *deferral // the slots read done or held past their window: listed until their deadline
	for i, x := range d.slots {
		if x.gone {
			continue // a release started its run
		}
		var st lock.State
		if states != nil {
			st = states[i]
		}
		// Each slot is listed again (its name's entry rewritten in place)
		// or forgotten.
		name := slotName{x.slot.Task, x.slot.ID}
		if l.current[x.t.Name] == nil {
			delete(l.byName, name)
			continue // a reload removed the task: it claims nothing more
		}
		// keep: listed, unread, until its deadline: only a release notice
		// (a rerun of a done slot; a failure, or a shutdown, of a holder
		// whose lease outlasts the window) claims it meanwhile.
		keep := false
		switch {
		case states != nil && st.Status == "done":
			keep = true
		case states != nil && st.Status == "running" && x.outlasts:
			keep = true // its TTL was not read: it ends past the deadline
		case states != nil && st.Status == "running" && st.TTL > 0:
			// A lease that outlasts the window: if the holder lives it
			// reports for itself; if it releases, a peer retries.
			keep = !storeNow.Add(st.TTL).Before(x.slot.Deadline)
			if !keep {
				holds = append(holds, held{x, st.TTL}) // listed below
				continue
			}
		case states != nil && st.Status == "free" && !d.final && now.Before(d.until):
			// Its preferred claimant's claim may be late rather than never
			// coming: on a loaded machine claims take longer than
			// preferWait, and every deferring replica claiming each such
			// slot would only load it more.
			if again == nil {
				again = &deferral{index: -1, start: d.start, checkAt: d.until, until: d.until, final: true}
			}
			l.byName[name] = deferRef{d: again, i: len(again.slots)}
			again.slots = append(again.slots, x)
			continue
		default:
			delete(l.byName, name)
			l.advance(l.newSlotRun(x.t, x.slot), false)
			continue
		}
		if !storeNow.Before(x.slot.Deadline) {
			delete(l.byName, name) // its window has closed
			continue
		}
		if settled == nil {
			settled = &deferral{index: -1, settled: true}
		}
		if at := now.Add(x.slot.Deadline.Sub(storeNow)); at.After(settled.checkAt) {
			settled.checkAt, settled.until = at, at
		}
		l.byName[name] = deferRef{d: settled, i: len(settled.slots)}
		settled.slots = append(settled.slots, x)
	}
	l.recycle(d)
	if again != nil {
		heap.Push(&l.checks, again)
	}
	if settled != nil {
		heap.Push(&l.checks, settled)
	}
	if len(holds) == 0 {
		return
	}
	slices.SortFunc(holds, func(a, b held) int { return int(a.ttl - b.ttl) })
	var next *deferral
	for _, h := range holds {
		if next == nil || h.ttl > next.checkAt.Sub(now)-recheckAfter+recheckSpan {
			if next != nil {
				heap.Push(&l.checks, next)
			}
			at := now.Add(h.ttl + recheckAfter)
			next = &deferral{index: -1, checkAt: at, until: at, final: true}
		}
		l.byName[slotName{h.x.slot.Task, h.x.slot.ID}] = deferRef{d: next, i: len(next.slots)}
		next.slots = append(next.slots, h.x)
	}
	heap.Push(&l.checks, next)
}

// settleWhole settles d where it is, if every slot it still lists is one
// that onChecked would keep listed until its deadline (read done, or held
// past its window): the common case, a turn's slots all taken by their
// claimants, costs no slot's entry moved to another deferral. nil states:
// every slot is covered by its claimant's tally (held, its lease
// outlasting its window).
func (l *loop) settleWhole(d *deferral, states []lock.State, now, storeNow time.Time) bool {
	var last time.Time
	held := lock.State{Status: "running"}
	for i, x := range d.slots {
		if x.gone {
			continue
		}
		st := held
		if states != nil {
			st = states[i]
		}
		switch {
		case l.current[x.t.Name] == nil || !storeNow.Before(x.slot.Deadline):
			return false
		case st.Status == "done":
		case st.Status == "running" && x.outlasts:
		case st.Status == "running" && st.TTL > 0 && !storeNow.Add(st.TTL).Before(x.slot.Deadline):
		default:
			return false
		}
		if x.slot.Deadline.After(last) {
			last = x.slot.Deadline
		}
	}
	if allGone(d) {
		return false
	}
	at := now.Add(last.Sub(storeNow))
	d.settled, d.final, d.checkAt, d.until = true, true, at, at
	heap.Push(&l.checks, d)
	return true
}

// onReleaseNotice starts the run of a listed slot that was released (a
// failed attempt's release, or an operator's rerun): it claims at once.
func (l *loop) onReleaseNotice(name slotName) {
	ref, ok := l.byName[name]
	if l.stopping {
		return
	}
	if !ok {
		if l.tally.tallier != nil {
			l.heardUnlisted(name)
		}
		return
	}
	delete(l.byName, name)
	x := &ref.d.slots[ref.i]
	x.gone = true
	ref.d.gone++
	if ref.d.index >= 0 && allGone(ref.d) {
		heap.Remove(&l.checks, ref.d.index)
	}
	if l.current[x.t.Name] == nil || !l.s.now().Before(x.slot.Deadline) {
		return // removed by a reload, or its window has closed
	}
	l.advance(l.newSlotRun(x.t, x.slot), false)
}

func allGone(d *deferral) bool { return d.gone == len(d.slots) }

// unlist forgets d's slots.
func (l *loop) unlist(d *deferral) {
	for _, x := range d.slots {
		if !x.gone {
			delete(l.byName, slotName{x.slot.Task, x.slot.ID})
		}
	}
	l.recycle(d)
}

// spareLists bounds the slot lists kept for reuse (loop.spare): a
// one-second task's turn's list lives a second, so one or two are in use
// at a time. Each spare is a turn's worth of entries held (750 KB at
// 10,000 slots a second on 3 replicas).
const spareLists = 2

// recycle empties d, keeping its list for a later turn's deferral: a
// list entry is 112 B a slot, on every deferring replica every second,
// the most a deferred slot allocated. No read of d is in flight (its
// answer was handled, or it was never read) and no name refers to it.
func (l *loop) recycle(d *deferral) {
	if cap(d.slots) > 0 && len(l.spare) < spareLists {
		clear(d.slots) // let its tasks and strings go
		l.spare = append(l.spare, d.slots[:0])
	}
	d.slots, d.gone = nil, 0
}

// newList is an empty slot list with room for n, a spare one if any.
func (l *loop) newList(n int) []deferredSlot {
	if k := len(l.spare); k > 0 {
		list := l.spare[k-1]
		l.spare[k-1] = nil
		l.spare = l.spare[:k-1]
		return list
	}
	return make([]deferredSlot, 0, n)
}

// dropChecks forgets every deferral: shutting down, nothing more is
// claimed.
func (l *loop) dropChecks() {
	l.closeFiring()
	for len(l.checks) > 0 {
		l.unlist(heap.Pop(&l.checks).(*deferral))
	}
	clear(l.heldChecks)
	l.heldChecks = l.heldChecks[:0]
	clear(l.byName)
}

// checkHeap orders deferrals by check time; each knows its index.
type checkHeap []*deferral

func (h checkHeap) Len() int           { return len(h) }
func (h checkHeap) Less(i, j int) bool { return h[i].checkAt.Before(h[j].checkAt) }
func (h checkHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *checkHeap) Push(x any) {
	d := x.(*deferral)
	d.index = len(*h)
	*h = append(*h, d)
}
func (h *checkHeap) Pop() any {
	old := *h
	d := old[len(old)-1]
	old[len(old)-1] = nil
	d.index = -1
	*h = old[:len(old)-1]
	return d
}
