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
// callback (which must not block) queues the slot's path, and a few
// workers read the slot again — which re-arms its ZooKeeper watches — and
// notify its lock.Watches.
type watcher struct {
	s *Store

	mu      sync.Mutex
	m       map[string][]*lock.Watch // slot path → watches
	pending map[string]bool          // slot path → notify (false: only re-arm)
	queue   chan struct{}            // a token per wake of the workers
	stop    chan struct{}
	wg      sync.WaitGroup
	closed  bool
}

// workers is how many slots the watcher reads again at once.
const workers = 64

func (w *watcher) init(s *Store) {
	w.s = s
	w.m = map[string][]*lock.Watch{}
	w.pending = map[string]bool{}
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

// Watch implements lock.Store. The slot's ZooKeeper watches are armed by
// a read the watcher makes at once (and again by Claim's): the engine
// watches a slot before it claims it, so no release after that claim's
// read goes unseen, and a replica that defers its claim to the slot's
// preferred claimant hears of that claim (lock.Taken) without claiming.
func (s *Store) Watch(slot lock.Slot) *lock.Watch {
	key := s.SlotPath(slot)
	var lw *lock.Watch
	lw = lock.NewWatch(func() { s.watch.remove(key, lw) })
	s.watch.mu.Lock()
	s.watch.m[key] = append(s.watch.m[key], lw)
	s.watch.mu.Unlock()
	s.watch.enqueue(key, false)
	return lw
}

func (w *watcher) remove(key string, lw *lock.Watch) {
	w.mu.Lock()
	defer w.mu.Unlock()
	set := w.m[key]
	for i, x := range set {
		if x == lw {
			set = append(set[:i], set[i+1:]...)
			break
		}
	}
	if len(set) == 0 {
		delete(w.m, key)
	} else {
		w.m[key] = set
	}
}

func (w *watcher) watched(key string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.m[key]) > 0
}

func (w *watcher) count(key string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.m[key])
}

// event is the client's callback: it must not block.
func (w *watcher) event(ev zk.Event) {
	switch ev.Type {
	case zk.EventNodeCreated, zk.EventNodeDeleted, zk.EventNodeDataChanged, zk.EventNotWatching:
	default:
		return
	}
	key := strings.TrimSuffix(ev.Path, "/run")
	if w.watched(key) {
		w.enqueue(key, true)
	}
}

func (w *watcher) enqueue(key string, notify bool) {
	w.mu.Lock()
	w.pending[key] = w.pending[key] || notify
	w.mu.Unlock()
	select {
	case w.queue <- struct{}{}:
	default:
	}
}

// next takes one pending slot.
func (w *watcher) next() (key string, notify, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, n := range w.pending {
		delete(w.pending, k)
		if len(w.pending) > 0 {
			select { // more for the other workers
			case w.queue <- struct{}{}:
			default:
			}
		}
		return k, n, true
	}
	return "", false, false
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
			key, notify, ok := w.next()
			if !ok {
				break
			}
			w.look(key, notify)
		}
	}
}

// look reads a watched slot again, which re-arms its watches, and, if
// notify, tells its Watches what it found: done, free (a release or a
// rerun), or held (Taken: a hint, also sent for a renewal).
func (w *watcher) look(key string, notify bool) {
	if !w.watched(key) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var sn node
	var serr error
	got := make(chan struct{})
	go func() { defer close(got); sn, serr = w.s.get(ctx, key, true) }()
	run, err := w.s.get(ctx, key+"/run", true)
	<-got
	if err != nil || serr != nil {
		w.retry(key, notify)
		return
	}
	if !notify {
		return
	}
	change := lock.Released
	switch {
	case run.exists && run.expired:
		return // held still, by a holder whose lease ran out: a claim's to take
	case run.exists:
		change = lock.Taken
	case sn.exists:
		if d, err := decodeSlot(sn.data); err == nil && d.done != "" {
			change = lock.Completed
		}
	}
	w.mu.Lock()
	for _, lw := range w.m[key] {
		lw.Notify(change)
	}
	w.mu.Unlock()
}

// retry looks at key again after a while: the read failed (no connection,
// or the session expired: the client reports every watch lost, and they
// are armed again on the next session).
func (w *watcher) retry(key string, notify bool) {
	t := time.NewTimer(100 * time.Millisecond)
	defer t.Stop()
	select {
	case <-w.stop:
	case <-t.C:
		w.enqueue(key, notify)
	}
}
