package lock

import "sync/atomic"

// Change is what a slot's watch reports.
type Change uint8

const (
	// Released: the holder released the slot after a failure, or an
	// operator reran it: it may be claimed again now.
	Released Change = iota + 1
	// Completed: the holder marked the slot done.
	Completed
	// Taken: a claim of the slot was won (by any replica, the watcher's own
	// included). A hint, sent by a Redis store only, once it has announced
	// a replica: one notice per round trip of claims, naming every slot it
	// won (claim.lua publishes it; see batcher.takenChannel).
	Taken
)

// Watch delivers a signal on C each time a holder releases the watched slot.
// Signals do not queue beyond one: a waiter that was busy sees one pending
// signal, which is all it needs to claim again.
type Watch struct {
	c     chan struct{}
	fn    atomic.Pointer[func(Change)] // set by OnChange: called instead of signalling c
	stop  func()
	relay *Watch // set: signals go to relay instead (a Redlock node's watch)
}

// C is the channel on which releases are signalled.
func (w *Watch) C() <-chan struct{} { return w.c }

// Stop ends the watch. It is safe to call more than once.
func (w *Watch) Stop() { w.stop() }

// OnChange makes every later release (or operator's rerun) of the slot
// call f(Released) instead of signalling C, its completion by the holder
// f(Completed), and a won claim of it f(Taken), so that a replica watching
// ten thousand slots needs no goroutine per slot to wait on them, and
// learns that a slot is taken or done without claiming it; a signal
// already pending on C stays there. f runs on the store's notification
// goroutine while it holds the store's lock: it must return quickly and
// must not call the store (Stop included). Completed and Taken are hints:
// a Redlock store never reports either (one node's state is not a
// quorum's), nor does Memory report Taken (it has one process).
func (w *Watch) OnChange(f func(Change)) { w.fn.Store(&f) }

// notify delivers a change; only OnChange hears a completion or a claim.
func (w *Watch) notify(c Change) {
	if w.relay != nil {
		if c == Released {
			w.relay.notify(Released)
		}
		return
	}
	if f := w.fn.Load(); f != nil {
		(*f)(c)
		return
	}
	if c != Released {
		return
	}
	select {
	case w.c <- struct{}{}:
	default:
	}
}

// watchers is the registry behind Watch, shared by both stores: keys are
// state keys, and one notification wakes every watcher of that key. A key
// has one watcher per watching replica in practice, so a slice (not a set)
// keeps the ten thousand keys of a burst small.
type watchers struct {
	m map[string][]*Watch
}

func (ws *watchers) add(key string, w *Watch) {
	if ws.m == nil {
		ws.m = map[string][]*Watch{}
	}
	ws.m[key] = append(ws.m[key], w)
}

func (ws *watchers) remove(key string, w *Watch) {
	set := ws.m[key]
	for i, x := range set {
		if x == w {
			set[i] = set[len(set)-1]
			set[len(set)-1] = nil
			set = set[:len(set)-1]
			break
		}
	}
	if len(set) == 0 {
		delete(ws.m, key)
	} else {
		ws.m[key] = set
	}
}

func (ws *watchers) notify(key string, c Change) {
	for _, w := range ws.m[key] {
		w.notify(c)
	}
}
