package lock

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Change is what a slot's watch reports.
type Change uint8

const (
	// Released: the holder released the slot after a failure, or an
	// operator reran it: it may be claimed again now.
	Released Change = iota + 1
	// Completed: the holder marked the slot done. A hint, sent by etcd,
	// ZooKeeper and Memory; Redis sends none since 2026-11-30 (every
	// replica received every completion's, which grew with the fleet),
	// though it still understands the notices of a replica from before.
	Completed
	// Taken: a claim of the slot was won (by any replica, the watcher's own
	// included). A hint, sent by etcd and by ZooKeeper (which may also
	// send it for a renewal); Redis sends none (its deferring replicas
	// read the slots they left in batches), though it still understands
	// the notices of a replica from before 2026-11-30.
	Taken
)

// Watch delivers a signal on C each time a holder releases the watched slot.
// Signals do not queue beyond one: a waiter that was busy sees one pending
// signal, which is all it needs to claim again.
type Watch struct {
	c    chan struct{}
	fn   atomic.Pointer[func(Change)] // set by OnChange: called instead of signalling c
	stop func()
}

// NewWatch returns a Watch for a store to deliver to with Notify; stop
// runs once, on the first Stop.
func NewWatch(stop func()) *Watch {
	return &Watch{c: make(chan struct{}, 1), stop: sync.OnceFunc(stop)}
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
// a Redis or Redlock store reports neither (a Redlock node's state is not
// a quorum's), nor does Memory report Taken (it has one process); a
// watcher learns such a slot's end when it claims it again.
func (w *Watch) OnChange(f func(Change)) { w.fn.Store(&f) }

// Notify delivers a change of the watched slot: Released (a release or an
// operator's rerun) wakes C, or calls the OnChange function; Completed and
// Taken only reach an OnChange function. The store calls it.
func (w *Watch) Notify(c Change) {
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

// Peeker is a store on which a replica leaves thousands of slots to their
// preferred claimants without a Watch per slot (package scheduler keeps
// only a list of them): it hears every release on one function, and reads
// their states in one batch. A store whose notices cannot name the slot
// (a Redlock quorum's: one master's message says nothing of the quorum)
// does not implement it; etcd and ZooKeeper write a notice beside each
// release for it.
type Peeker interface {
	// WatchReleases calls f with the task and slot id of every later
	// release of any slot (a failed attempt's, with or without a retry
	// backoff, and an operator's rerun) until stop is called; stop is
	// safe to call more than once. As with OnChange, f runs on the store's
	// notification goroutine while it holds the store's lock: it must
	// return quickly and must not call the store. A notice lost while the
	// store reconnects is not repeated: a watcher also reads the slot's
	// state when the holder's lease runs out.
	WatchReleases(f func(task, id string)) (stop func())

	// Peek reads what has become of many slots more cheaply than States:
	// each one's Status, and the TTL of a running slot i for which ttl[i]
	// is true (of every running slot if ttl is nil), nothing else (no
	// attempts, no holder): which are done, held (until when) or anything
	// else. A running slot whose TTL was not asked for may read TTL 0: its
	// reader knows the lease outlasts what it waits for (on Redis, that
	// spares a PTTL per slot). A slot a store cannot read may read as any
	// status but "done" or "running": its reader then claims it, and the
	// claim reports what is wrong.
	Peek(ctx context.Context, slots []Slot, ttl []bool) ([]State, error)

	// Tally records replica's tally of its slots due at at, for ttl: as
	// their preferred claimant, it got every claim it sent of them
	// answered won, held or done, and sum is over those slots. A
	// deferring replica whose own sum over the slots it left to that
	// claimant matches reads none of them (see package scheduler's
	// tally.go).
	Tally(ctx context.Context, at time.Time, replica string, sum uint64, ttl time.Duration) error
	// Tallies reads the sums recorded for at by each of replicas, in
	// their order: 0 where none is.
	Tallies(ctx context.Context, at time.Time, replicas []string) ([]uint64, error)
}
