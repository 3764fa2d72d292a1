package etcdlock

import (
	"context"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/retry"
)

// hub is the Store's one prefix watch over every slot key, fanned out to
// the slots' lock.Watches: a deleted state key (released, rerun, or its
// lease expired) is a release, a done value a completion. When the watch
// had to be opened again without knowing where it stopped (the first
// time, or after etcd compacted past it), every watcher is woken once: a
// spurious wake costs a claim, a missed one a lease.
type hub struct {
	s *Store

	mu      sync.Mutex
	m       map[string][]*lock.Watch
	started bool
	ready   chan struct{} // closed when the watch is first established
}

func newHub(s *Store) *hub {
	return &hub{s: s, m: map[string][]*lock.Watch{}, ready: make(chan struct{})}
}

// Watch implements lock.Store.
func (s *Store) Watch(slot lock.Slot) *lock.Watch {
	key, _, _ := s.keys(slot)
	h := s.hub
	var w *lock.Watch
	w = lock.NewWatch(func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		list := h.m[key]
		for i, x := range list {
			if x == w {
				list[i] = list[len(list)-1]
				list = list[:len(list)-1]
				break
			}
		}
		if len(list) == 0 {
			delete(h.m, key)
		} else {
			h.m[key] = list
		}
	})
	h.mu.Lock()
	h.m[key] = append(h.m[key], w)
	h.startLocked()
	h.mu.Unlock()
	return w
}

// Subscribe starts the store's watches (of the slots, and of the release
// notices: releases.go), if they have not started, and waits until etcd
// has established them (or ctx ends), so that no release after it returns
// goes unseen.
func (s *Store) Subscribe(ctx context.Context) error {
	s.hub.mu.Lock()
	s.hub.startLocked()
	s.hub.mu.Unlock()
	s.rels.mu.Lock()
	s.rels.startLocked()
	s.rels.mu.Unlock()
	for _, ready := range []chan struct{}{s.hub.ready, s.rels.ready} {
		select {
		case <-ready:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (h *hub) startLocked() {
	if !h.started {
		h.started = true
		h.s.goOwned(h.run)
	}
}

// count is the number of this process's watchers of state key.
func (h *hub) count(key string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.m[key])
}

func (h *hub) run() {
	ctx := h.s.ctx
	prefix := h.s.prefix + ":{"
	var rev int64 // the last revision seen; 0: none yet
	backoff := retry.Backoff{Min: 50 * time.Millisecond, Max: 2 * time.Second}
	for n := 0; ctx.Err() == nil; n++ {
		opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithCreatedNotify()}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev+1))
		}
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for resp := range h.s.cli.Watch(wctx, prefix, opts...) {
			if resp.Created {
				if rev == 0 {
					rev = resp.Header.Revision
					h.wakeAll()
				}
				h.mu.Lock()
				select {
				case <-h.ready:
				default:
					close(h.ready)
				}
				h.mu.Unlock()
				n = 0
				continue
			}
			if resp.CompactRevision > 0 || resp.Err() != nil {
				if resp.CompactRevision > 0 {
					rev = 0 // start again from now, waking everybody
				}
				break
			}
			for _, ev := range resp.Events {
				h.deliver(ev)
			}
			rev = resp.Header.Revision
		}
		cancel()
		select {
		case <-ctx.Done():
		case <-time.After(backoff.Delay(n)):
		}
	}
}

func (h *hub) deliver(ev *clientv3.Event) {
	key := string(ev.Kv.Key)
	if !strings.HasSuffix(key, "}") { // attempts, base: not a state key
		return
	}
	change := lock.Released
	switch {
	case ev.Type == mvccpb.DELETE:
	case strings.HasPrefix(string(ev.Kv.Value), lock.BackoffPrefix): // a release with a retry backoff
	case strings.HasPrefix(string(ev.Kv.Value), "done:"):
		change = lock.Completed
	case ev.IsCreate() && strings.HasPrefix(string(ev.Kv.Value), "run:"):
		change = lock.Taken // a claim won: a deferring replica need not claim
	default:
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, w := range h.m[key] {
		w.Notify(change)
	}
}

func (h *hub) wakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, list := range h.m {
		for _, w := range list {
			w.Notify(lock.Released)
		}
	}
}
