package lock

import "sync/atomic"

// Watch delivers a signal on C each time a holder releases the watched slot.
// Signals do not queue beyond one: a waiter that was busy sees one pending
// signal, which is all it needs to claim again.
type Watch struct {
	c     chan struct{}
	fn    atomic.Pointer[func(bool)] // set by OnChange: called instead of signalling c
	stop  func()
	relay *Watch // set: signals go to relay instead (a Redlock node's watch)
}

// C is the channel on which releases are signalled.
func (w *Watch) C() <-chan struct{} { return w.c }

// Stop ends the watch. It is safe to call more than once.
func (w *Watch) Stop() { w.stop() }

// OnChange makes every later release (or operator's rerun) of the slot
// call f(false) instead of signalling C, and its completion by the holder
// call f(true), so that a replica watching ten thousand slots needs no
// goroutine per slot to wait on them, and learns that a slot is done
// without claiming it again; a signal already pending on C stays there.
// f runs on the store's notification goroutine while it holds the store's
// lock: it must return quickly and must not call the store (Stop
// included). A completion is a hint: a Redlock store never reports one
// (one node's done marker is not a quorum's).
func (w *Watch) OnChange(f func(done bool)) { w.fn.Store(&f) }

// notify delivers a release, or with done a completion, which only OnChange
// hears.
func (w *Watch) notify(done bool) {
	if w.relay != nil {
		if !done {
			w.relay.notify(false)
		}
		return
	}
	if f := w.fn.Load(); f != nil {
		(*f)(done)
		return
	}
	if done {
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

func (ws *watchers) notify(key string, done bool) {
	for _, w := range ws.m[key] {
		w.notify(done)
	}
}
