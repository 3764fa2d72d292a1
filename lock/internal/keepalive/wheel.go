package keepalive

import (
	"sync"
	"time"
)

// watchdogs holds the next wake of every lease of this process that waits
// for one: a min-heap by wake time, and one timer set to the earliest. A
// lease costs it an entry, no allocation; a wake that comes due starts the
// lease's tick on a goroutine of its own (a renewal waits for its round
// trip, and the renewals of one instant must leave together for the
// store's batching to join them). Between wakes no goroutine waits here:
// the timer is the runtime's.
var watchdogs wheel

type wheel struct {
	mu    sync.Mutex
	heap  []*Lease
	timer *time.Timer // made on first use; fires fire
	// armed is the instant the timer is set for; zero while it is not
	// set. A wake earlier than it resets the timer; a later one, or a
	// removal, leaves it: fire finds what is due and sets it again.
	armed time.Time
}

// add puts k on the heap, to wake at at. k must not be on it.
func (w *wheel) add(k *Lease, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	k.at = at
	w.heap = append(w.heap, k)
	k.pos = len(w.heap)
	w.up(k.pos - 1)
	w.arm()
}

// remove takes k off the heap, and reports whether it was on it.
func (w *wheel) remove(k *Lease) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if k.pos == 0 {
		return false
	}
	w.cut(k.pos - 1)
	return true
}

// wake moves k's wake to at, if that is sooner, and reports whether k is
// on the heap.
func (w *wheel) wake(k *Lease, at time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if k.pos == 0 {
		return false
	}
	if at.Before(k.at) {
		k.at = at
		w.up(k.pos - 1)
		w.arm()
	}
	return true
}

// fire takes every lease whose wake is due off the heap and starts its
// tick, then sets the timer for the next wake.
func (w *wheel) fire() {
	w.mu.Lock()
	now := time.Now()
	var due []*Lease
	for len(w.heap) > 0 && !w.heap[0].at.After(now) {
		k := w.heap[0]
		w.cut(0)
		due = append(due, k)
	}
	w.armed = time.Time{}
	w.arm()
	w.mu.Unlock()
	for _, k := range due {
		go k.tick()
	}
}

// arm sets the timer for the earliest wake, unless it is set for it or
// sooner. Under mu.
func (w *wheel) arm() {
	if len(w.heap) == 0 {
		return
	}
	first := w.heap[0].at
	if !w.armed.IsZero() && !first.Before(w.armed) {
		return
	}
	w.armed = first
	if w.timer == nil {
		w.timer = time.AfterFunc(time.Until(first), w.fire)
		return
	}
	w.timer.Reset(time.Until(first))
}

// cut removes the entry at i. Under mu.
func (w *wheel) cut(i int) {
	last := len(w.heap) - 1
	k := w.heap[i]
	w.swap(i, last)
	w.heap[last] = nil
	w.heap = w.heap[:last]
	k.pos = 0
	if i < last {
		w.down(i)
		w.up(i)
	}
	if len(w.heap) == 0 && cap(w.heap) > 1024 {
		w.heap = nil // let the array of a burst's leases go
	}
}

func (w *wheel) less(i, j int) bool { return w.heap[i].at.Before(w.heap[j].at) }

func (w *wheel) swap(i, j int) {
	w.heap[i], w.heap[j] = w.heap[j], w.heap[i]
	w.heap[i].pos, w.heap[j].pos = i+1, j+1
}

func (w *wheel) up(i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if !w.less(i, parent) {
			return
		}
		w.swap(i, parent)
		i = parent
	}
}

func (w *wheel) down(i int) {
	n := len(w.heap)
	for {
		least := i
		if l := 2*i + 1; l < n && w.less(l, least) {
			least = l
		}
		if r := 2*i + 2; r < n && w.less(r, least) {
			least = r
		}
		if least == i {
			return
		}
		w.swap(i, least)
		i = least
	}
}
