package zklock

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/slotd/slotd/lock"
)

// watcher delivers the watch events of watched slots: the client's event
// callback (which must not block) queues what the event asks of the
// slot, and a few workers do it — most often one request, or none — and
// notify its lock.Watches.
//
// What a watched slot costs is what bounds a burst: every replica watches
// every slot it fires, so a request per event per replica is multiplied by
// the replicas. ZooKeeper's watches fire once, and an event names only the
// node and what happened to it, so the watcher arms one watch at a time
// where one does, and reads only when the event does not say enough:
//
//   - Armed: an exists watch of the run node (one request), which fires
//     when a claim creates it.
//   - The run node created or rewritten (a claim, a renewal): Taken, told
//     from the event alone; the same exists watch again (one request),
//     which now fires when the run node changes or goes.
//   - The run node deleted (a completion, a release, a session's end): a
//     read of the slot node with a watch (one request) says which —
//     Completed, its watch left for an operator's rerun; otherwise an exists
//     watch of the run node again says Taken (claimed since) or Released.
//   - The slot node changed (a rerun, a claim after a release), or watches
//     lost with a session: both nodes read with watches (look), and what
//     they hold is told.
//
// A claim made through the store arms what its result needs (see
// Store.Claim): a slot found held, the exists watch, checked against the
// run node the claim read; a slot found done or out of attempts, the slot
// node's watch, checked against the version read.
type watcher struct {
	s *Store

	mu      sync.Mutex
	m       map[string]*watched // slot path → its watches
	pending map[string]job      // slot path → what to do
	busy    map[string]bool     // slot paths a worker is on
	queue   chan struct{}       // a token per wake of the workers
	stop    chan struct{}
	wg      sync.WaitGroup
	closed  bool
}

// watched is one watched slot's Watches and what the store knows of it.
type watched struct {
	ws []*lock.Watch
	// eager: one of ws was armed at once (Watch), not by a claim
	// (WatchClaims): the run node's own watch tells every change, so
	// what a claim, a completion or a release arms for a WatchClaims
	// watch would only duplicate it.
	eager bool
	// seen: a node of the slot was seen (a claim's read, an event):
	// the slot has been claimed, and a claim reads before it writes (fresh).
	seen bool
}

// job is what the watcher is to do for one slot: the steps asked since a
// worker last took it.
type job struct {
	steps step
	// version: with armSlot, the slot node's version last read or written.
	version int32
}

// step is one thing asked of the watcher for a slot.
type step uint8

const (
	// armRun: arm the run node's exists watch; if the node is there (a
	// claim came first), read it and tell Taken unless its lease ran out.
	armRun step = 1 << iota
	// armHeld: arm the run node's exists watch; a claim found the node, so
	// if it is gone now, its deletion was missed: act as on runGone.
	armHeld
	// armSlot: arm the slot node's watch; it was last at job.version, so
	// if it has moved since, look.
	armSlot
	// runChanged: the run node was created or rewritten: Taken, and armHeld.
	runChanged
	// runGone: the run node was deleted.
	runGone
	// lookAll: read both nodes with watches and tell what they hold.
	lookAll
)

// workers is how many slots the watcher handles at once.
const workers = 64

func (w *watcher) init(s *Store) {
	w.s = s
	w.m = map[string]*watched{}
	w.pending = map[string]job{}
	w.busy = map[string]bool{}
	w.queue = make(chan struct{}, 1)
	w.stop = make(chan struct{})
}

func (w *watcher) start() {
	for range workers {
		w.wg.Add(1)
		go w.work()
	}
}

func (w *watcher) close() {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.closed = true
	w.mu.Unlock()
	close(w.stop)
	w.wg.Wait()
}

// Watch implements lock.Store. The slot's run node is watched from a
// request the watcher makes at once (an exists watch): a replica that
// defers its claim to the slot's preferred claimant hears of that claim
// (lock.Taken) without claiming, and every release or completion after it.
// A claim of the slot through this store arms what its result needs
// before it returns (see Store.Claim), so no release after that claim's
// read goes unseen.
func (s *Store) Watch(slot lock.Slot) *lock.Watch { return s.watch.add(s.SlotPath(slot), true) }

// WatchClaims is Watch for a slot this replica claims at once: nothing is
// armed until the slot's claims through this store arm what their results
// need — a slot found held, its run node's watch; one found done or out of
// attempts, or completed by this store, its slot node's watch (for an
// operator's rerun); one this store released, or whose claim failed, its
// run node's watch — and this store's own completion or release is told
// to it without a watch. In a burst the preferred claimant of a slot so
// pays one request to watch it (after its completion) instead of three.
func (s *Store) WatchClaims(slot lock.Slot) *lock.Watch { return s.watch.add(s.SlotPath(slot), false) }

func (w *watcher) add(key string, eager bool) *lock.Watch {
	var lw *lock.Watch
	lw = lock.NewWatch(func() { w.remove(key, lw) })
	w.mu.Lock()
	e := w.m[key]
	if e == nil {
		e = &watched{}
		w.m[key] = e
	}
	e.ws = append(e.ws, lw)
	arm := eager && !e.eager
	e.eager = e.eager || eager
	w.mu.Unlock()
	if arm {
		w.enqueue(key, job{steps: armRun})
	}
	return lw
}

func (w *watcher) remove(key string, lw *lock.Watch) {
	w.mu.Lock()
	defer w.mu.Unlock()
	e := w.m[key]
	if e == nil {
		return
	}
	for i, x := range e.ws {
		if x == lw {
			e.ws = append(e.ws[:i], e.ws[i+1:]...)
			break
		}
	}
	if len(e.ws) == 0 {
		delete(w.m, key)
	}
}

// state reports whether key is watched, and if so whether eagerly.
func (w *watcher) state(key string) (watched, eager bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	e := w.m[key]
	return e != nil, e != nil && e.eager
}

func (w *watcher) watched(key string) bool {
	ok, _ := w.state(key)
	return ok
}

func (w *watcher) count(key string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	if e := w.m[key]; e != nil {
		return len(e.ws)
	}
	return 0
}

// see records that a node of key was seen, if key is watched; it reports
// whether key is watched and whether eagerly.
func (w *watcher) see(key string, seen bool) (watched, eager bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	e := w.m[key]
	if e == nil {
		return false, false
	}
	e.seen = e.seen || seen
	return true, e.eager
}

// event is the client's callback: it must not block.
func (w *watcher) event(ev zk.Event) {
	var st step
	key, isRun := strings.CutSuffix(ev.Path, "/run")
	switch {
	case ev.Type == zk.EventNotWatching:
		st = lookAll
	case !isRun && (ev.Type == zk.EventNodeCreated || ev.Type == zk.EventNodeDeleted || ev.Type == zk.EventNodeDataChanged):
		st = lookAll
	case ev.Type == zk.EventNodeCreated || ev.Type == zk.EventNodeDataChanged:
		st = runChanged
	case ev.Type == zk.EventNodeDeleted:
		st = runGone
	default:
		return
	}
	if watched, _ := w.see(key, ev.Type != zk.EventNotWatching); watched {
		w.enqueue(key, job{steps: st})
	}
}

// fresh reports whether slot may never have been claimed, as far as this
// store knows: it is not watched, or no node of it has been seen since it
// was (a claim's read, or an event).
func (s *Store) fresh(slot lock.Slot) bool {
	s.watch.mu.Lock()
	defer s.watch.mu.Unlock()
	e := s.watch.m[s.SlotPath(slot)]
	return e == nil || !e.seen
}

// afterClaim arms what a claim of a watched slot, answered c (or err) from
// reading sn and run, needs to hear next: a held slot's release, a
// settled slot's rerun; for a WatchClaims watch, after any other answer,
// any change. A won claim needs nothing: an eager watch's run node watch fires
// at its creation and is armed again on it, and this store's completion
// or release of it arms what follows (afterComplete, afterRelease).
func (w *watcher) afterClaim(slot lock.Slot, c lock.Claim, err error, sn, run node) {
	key := w.s.SlotPath(slot)
	watched, eager := w.see(key, err == nil && sn.exists)
	switch {
	case !watched:
	case err == nil && c.Result == lock.Won:
	case err == nil && c.Result == lock.Held && run.exists:
		w.enqueue(key, job{steps: armHeld})
	case err == nil && (c.Result == lock.Done || c.Result == lock.Exhausted) && sn.exists:
		w.enqueue(key, job{steps: armSlot, version: sn.stat.Version})
	case !eager:
		// Early, late, or no answer: the run waits and claims again; a
		// peer's claim or completion meanwhile is still news to it.
		w.enqueue(key, job{steps: armRun})
	}
}

// afterComplete tells a watched slot's Watches that this store completed
// it, and for a WatchClaims watch arms the slot node's watch, at version
// (the completion's), for a rerun.
func (w *watcher) afterComplete(slot lock.Slot, version int32) {
	key := w.s.SlotPath(slot)
	watched, eager := w.state(key)
	if !watched {
		return
	}
	w.notify(key, lock.Completed)
	if !eager {
		w.enqueue(key, job{steps: armSlot, version: version})
	}
}

// afterRelease tells a watched slot's Watches that this store released
// it, and for a WatchClaims watch arms the run node's watch, for the next
// claim.
func (w *watcher) afterRelease(slot lock.Slot) {
	key := w.s.SlotPath(slot)
	watched, eager := w.state(key)
	if !watched {
		return
	}
	w.notify(key, lock.Released)
	if !eager {
		w.enqueue(key, job{steps: armRun})
	}
}

func (w *watcher) enqueue(key string, j job) {
	w.mu.Lock()
	p := w.pending[key]
	p.steps |= j.steps
	if j.steps&armSlot != 0 {
		p.version = j.version
	}
	w.pending[key] = p
	w.mu.Unlock()
	select {
	case w.queue <- struct{}{}:
	default:
	}
}

// next takes one pending slot that no other worker is on, and marks it
// busy: a slot's steps are done in the order their events came.
func (w *watcher) next() (key string, j job, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, p := range w.pending {
		if w.busy[k] {
			continue
		}
		delete(w.pending, k)
		w.busy[k] = true
		if len(w.pending) > 0 {
			select { // more for the other workers
			case w.queue <- struct{}{}:
			default:
			}
		}
		return k, p, true
	}
	return "", job{}, false
}

// done marks key no longer busy, and wakes a worker if more came for it.
func (w *watcher) done(key string) {
	w.mu.Lock()
	delete(w.busy, key)
	_, more := w.pending[key]
	w.mu.Unlock()
	if more {
		select {
		case w.queue <- struct{}{}:
		default:
		}
	}
}

func (w *watcher) work() {
	defer w.wg.Done()
	for {
		select {
		case <-w.stop:
			return
		case <-w.queue:
		}
		for {
			key, j, ok := w.next()
			if !ok {
				break
			}
			if w.watched(key) && !w.do(key, j) {
				w.retry(key, j)
			}
			w.done(key)
		}
	}
}

// do does j's steps for key; false if a request failed (the steps are
// done again later).
func (w *watcher) do(key string, j job) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	switch {
	case j.steps&lookAll != 0:
		return w.look(ctx, key)
	case j.steps&runGone != 0:
		return w.gone(ctx, key)
	}
	if j.steps&runChanged != 0 {
		w.notify(key, lock.Taken)
	}
	if j.steps&(armRun|armHeld|runChanged) != 0 {
		there, err := w.exists(ctx, key+"/run")
		if err != nil {
			return false
		}
		switch {
		case !there && j.steps&(armHeld|runChanged) != 0:
			// Gone between the claim's read (or the event) and the
			// watch: the deletion's event was never armed.
			return w.gone(ctx, key)
		case there && j.steps&(armHeld|runChanged) == 0:
			// Claimed before the watch was armed: Taken, unless by a
			// holder whose lease ran out (a claim's to take).
			w.see(key, true)
			if !w.takenBy(ctx, key) {
				return false
			}
		}
	}
	if j.steps&armSlot != 0 {
		st, err := call(ctx, func() (*zk.Stat, error) { _, st, _, err := w.s.conn.ExistsW(key); return st, err })
		if err != nil {
			return false
		}
		if st == nil || st.Version != j.version {
			return w.look(ctx, key) // changed since the claim read it
		}
	}
	return true
}

// takenBy reads key's run node and tells Taken if its lease has not run
// out by the leader's clock; false if a request failed.
func (w *watcher) takenBy(ctx context.Context, key string) bool {
	run, err := w.s.get(ctx, key+"/run", false)
	if err != nil {
		return false
	}
	lo, _, err := w.s.now(ctx)
	if err != nil {
		return false
	}
	if left, ok := w.s.leaseLeft(run, lo); run.exists && (!ok || left > 0) {
		w.notify(key, lock.Taken)
	}
	return true
}

// exists arms an exists watch of path and reports whether it exists.
func (w *watcher) exists(ctx context.Context, path string) (bool, error) {
	return call(ctx, func() (bool, error) { ok, _, _, err := w.s.conn.ExistsW(path); return ok, err })
}

// gone acts on the deletion of key's run node: the slot node, read with a
// watch, says whether the slot was completed; if not, the run node's
// exists watch again says whether it was claimed since (Taken) or is free
// (Released).
func (w *watcher) gone(ctx context.Context, key string) bool {
	sn, err := w.s.get(ctx, key, true)
	if err != nil {
		return false
	}
	if sn.exists {
		if d, err := decodeSlot(sn.data); err == nil && d.done != "" {
			w.notify(key, lock.Completed)
			return true
		}
	}
	there, err := w.exists(ctx, key+"/run")
	if err != nil {
		return false
	}
	change := lock.Released
	if there {
		change = lock.Taken
	}
	w.notify(key, change)
	return true
}

// look reads a watched slot's two nodes with watches and tells its Watches
// what it found: done, free (a release or a rerun), or held (Taken).
func (w *watcher) look(ctx context.Context, key string) bool {
	var sn node
	var serr error
	got := make(chan struct{})
	go func() { defer close(got); sn, serr = w.s.get(ctx, key, true) }()
	run, err := w.s.get(ctx, key+"/run", true)
	<-got
	if err != nil || serr != nil {
		return false
	}
	change := lock.Released
	switch {
	case run.exists && run.expired:
		return true // held still, by a holder whose lease ran out: a claim's to take
	case run.exists:
		change = lock.Taken
	case sn.exists:
		if d, err := decodeSlot(sn.data); err == nil && d.done != "" {
			change = lock.Completed
		}
	}
	w.notify(key, change)
	return true
}

func (w *watcher) notify(key string, c lock.Change) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if e := w.m[key]; e != nil {
		for _, lw := range e.ws {
			lw.Notify(c)
		}
	}
}

// retry does j for key again after a while: a request failed (no
// connection, or the session expired: the client reports every watch
// lost, and they are armed again on the next session).
func (w *watcher) retry(key string, j job) {
	t := time.NewTimer(100 * time.Millisecond)
	defer t.Stop()
	select {
	case <-w.stop:
	case <-t.C:
		w.enqueue(key, j)
	}
}
