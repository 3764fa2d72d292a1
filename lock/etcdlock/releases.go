package etcdlock

import (
	"context"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/slotd/slotd/retry"
)

// Release notices. Every write that lets a slot be claimed again by a
// peer at once (Release, ReleaseAfter, Rerun, and the janitor's deletion
// of a hold whose renewals stopped) also puts, in its transaction, the
// slot's notice key "<prefix>:released:{<task>:<slot id>}" on a lease of
// noticeTTL. Each process watches the notice prefix once, puts only (the
// notices' expiry is filtered out by the member), and names the slot to
// its WatchReleases functions: a replica that left thousands of slots to
// their preferred claimants hears each release without a watch per slot,
// and without the claims and completions of every slot that the slot
// prefix's watch (hub) carries — a notice costs a write only when a slot
// is released, which a fleet that mostly succeeds seldom does.
//
// A notice is not written for a holder's lease that runs out (a replica
// cut off, frozen or dead): a reader learns of that from the TTL its Peek
// read, as on Redis.

// noticeTTL is how long a release notice key lives. A watch hears its put
// whatever its TTL (one reopened after a member's failure resumes from
// the revision it had reached, in etcd's history), so the key need only
// outlive the transaction: the TTL bounds what a failing fleet's notices
// occupy, a bucket lease (leases.go) per few seconds.
const noticeTTL = 5 * time.Second

// noticeKey is the release notice key of state key (see Keys).
func (s *Store) noticeKey(state string) string {
	return s.prefix + ":released:" + strings.TrimPrefix(state, s.prefix+":")
}

// noticeOp puts state's release notice on lease id (a bucket of noticeTTL).
func (s *Store) noticeOp(state string, id clientv3.LeaseID) clientv3.Op {
	return clientv3.OpPut(s.noticeKey(state), "", clientv3.WithLease(id))
}

// noticeSlot is the task and slot id a notice key names.
func (s *Store) noticeSlot(key string) (task, id string, ok bool) {
	rest, ok := strings.CutPrefix(key, s.prefix+":released:{")
	if !ok || !strings.HasSuffix(rest, "}") {
		return "", "", false
	}
	// Task names hold no colon: the first one ends it.
	task, id, ok = strings.Cut(rest[:len(rest)-1], ":")
	return task, id, ok && task != "" && id != ""
}

// releases is the Store's one watch of the release notices, fanned out to
// its WatchReleases functions.
type releases struct {
	s *Store

	mu      sync.Mutex
	fs      map[int]func(task, id string)
	next    int
	started bool
	ready   chan struct{} // closed when the watch is first established
}

func newReleases(s *Store) *releases {
	return &releases{s: s, fs: map[int]func(task, id string){}, ready: make(chan struct{})}
}

// WatchReleases implements lock.Peeker over the store's watch of
// the release notices (started here if Subscribe has not started it: a
// release before etcd has established it goes unheard). A notice lost
// while the watch is reopened past a compaction is not repeated.
func (s *Store) WatchReleases(f func(task, id string)) (stop func()) {
	r := s.rels
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.next
	r.next++
	r.fs[n] = f
	r.startLocked()
	return sync.OnceFunc(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		delete(r.fs, n)
	})
}

func (r *releases) startLocked() {
	if !r.started {
		r.started = true
		r.s.goOwned(r.run)
	}
}

func (r *releases) run() {
	ctx := r.s.ctx
	prefix := r.s.prefix + ":released:"
	var rev int64 // the last revision seen; 0: none yet
	backoff := retry.Backoff{Min: 50 * time.Millisecond, Max: 2 * time.Second}
	for n := 0; ctx.Err() == nil; n++ {
		opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithCreatedNotify(), clientv3.WithFilterDelete()}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev+1))
		}
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for resp := range r.s.cli.Watch(wctx, prefix, opts...) {
			if resp.Created {
				if rev == 0 {
					rev = resp.Header.Revision
				}
				r.mu.Lock()
				select {
				case <-r.ready:
				default:
					close(r.ready)
				}
				r.mu.Unlock()
				n = 0
				continue
			}
			if resp.CompactRevision > 0 || resp.Err() != nil {
				if resp.CompactRevision > 0 {
					rev = 0 // the notices in between are lost: readers read at lease end
				}
				break
			}
			r.mu.Lock()
			for _, ev := range resp.Events {
				if task, id, ok := r.s.noticeSlot(string(ev.Kv.Key)); ok {
					for _, f := range r.fs {
						f(task, id)
					}
				}
			}
			r.mu.Unlock()
			rev = resp.Header.Revision
		}
		cancel()
		select {
		case <-ctx.Done():
		case <-time.After(backoff.Delay(n)):
		}
	}
}
