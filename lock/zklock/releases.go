package zklock

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/retry"
)

// Release notices. ZooKeeper's watches are per node and fire once, and
// this client has no persistent recursive watch: no watch of a few nodes
// names every release. So every write that lets a slot be claimed again
// at once (Release, ReleaseAfter, Rerun) is followed by a notice: a TTL
// node, sequential, under one directory (<root>/.released), named after
// the slot ("<task>:<slot id>-<sequence>", each part escaped as in the
// slot's path); the directory is a container, gone while no notice is. Each process keeps one child watch on the directory
// (re-armed on each event, which costs it one listing) and names the slots
// of the children it had not listed before to its WatchReleases
// functions. A replica that left thousands of slots to their preferred
// claimants so hears each release with one request per burst of
// releases, and hears no claim or completion at all.
//
// The notice is its own request after the release's multi-op (this
// client's multi-op cannot create a TTL node): a holder that dies between
// the two leaves its release unannounced, and its peers find the slot
// free when they read it at the lease's end, as they would had it died
// holding it. A listing holds the notices of the last NoticeTTL plus the
// servers' container check interval (znode.container.checkIntervalMs, a
// minute by default): a fleet whose attempts fail by the hundred a second
// pays a listing of thousands of names per burst of releases.
//
// A holder's lease that runs out is announced by nothing: its peers read
// when the lease ends (Peek).

// NoticeTTL is the TTL of a release notice: it need only outlive the
// listings of the watchers that are connected (a watcher that reconnects
// within it still finds the notices made meanwhile).
const NoticeTTL = 5 * time.Second

// releasedPath is the directory of the release notices.
func (s *Store) releasedPath() string { return s.root + "/.released" }

// announce creates slot's release notice; a failure is only logged: the
// release landed, and the slot's readers find it free at the lease's end.
func (s *Store) announce(ctx context.Context, slot lock.Slot) {
	path := s.releasedPath() + "/" + escape(slot.Task) + ":" + escape(slot.ID) + "-"
	for try := 0; ; try++ {
		_, err := call(ctx, func() (string, error) {
			return s.conn.CreateTTL(path, nil, zk.FlagPersistentSequentialWithTTL, s.acl, NoticeTTL)
		})
		if errors.Is(err, zk.ErrNoNode) && try == 0 {
			if err = s.ensureReleased(ctx); err == nil {
				continue
			}
		}
		if err != nil {
			s.log.Debug("zklock: release notice not written; peers read the slot at its lease's end", "slot", slot.String(), "err", err)
		}
		return
	}
}

// ensureReleased creates the notices' directory (and the root) if missing:
// a container, which the servers delete once its last notice has gone.
func (s *Store) ensureReleased(ctx context.Context) error {
	if err := s.ensure(ctx, ""); err != nil {
		return err
	}
	_, err := call(ctx, func() (string, error) {
		return s.conn.CreateContainer(s.releasedPath(), nil, zk.FlagContainer, s.acl)
	})
	if errors.Is(err, zk.ErrNodeExists) {
		return nil
	}
	return err
}

// noticeSlot is the task and slot id of a notice's name.
func noticeSlot(name string) (task, id string, ok bool) {
	const seq = 10 // the digits ZooKeeper appends
	if len(name) < seq+1 || name[len(name)-seq-1] != '-' {
		return "", "", false
	}
	et, ei, ok := strings.Cut(name[:len(name)-seq-1], ":") // escape leaves no colon in a task name, which holds none
	if !ok {
		return "", "", false
	}
	task, terr := url.PathUnescape(et)
	id, ierr := url.PathUnescape(ei)
	return task, id, terr == nil && ierr == nil
}

// releases is the Store's one child watch of the notices' directory,
// fanned out to its WatchReleases functions.
type releases struct {
	s *Store

	mu      sync.Mutex
	fs      map[int]func(task, id string)
	next    int
	started bool
	ready   chan struct{} // closed when the first listing is in
	stop    chan struct{}
	wg      sync.WaitGroup
}

func (r *releases) init(s *Store) {
	r.s = s
	r.fs = map[int]func(task, id string){}
	r.ready = make(chan struct{})
	r.stop = make(chan struct{})
}

// WatchReleases implements lock.Peeker over the store's child
// watch of the release notices (started here if Subscribe has not
// started it: a release before its first listing goes unheard).
func (s *Store) WatchReleases(f func(task, id string)) (stop func()) {
	r := &s.rels
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

// Subscribe starts the watch of the release notices, if it has not
// started, and waits for its first listing (or ctx's end), so that no
// release after it returns goes unheard. A slot's own watch (Watch) needs
// no subscription.
func (s *Store) Subscribe(ctx context.Context) error {
	r := &s.rels
	r.mu.Lock()
	r.startLocked()
	r.mu.Unlock()
	select {
	case <-r.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *releases) startLocked() {
	if !r.started {
		r.started = true
		r.wg.Add(1)
		go r.run()
	}
}

// close stops the watch; the caller closes the connection, which ends a
// listing in flight, and then waits (wait).
func (r *releases) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
}

func (r *releases) wait() { r.wg.Wait() }

func (r *releases) run() {
	defer r.wg.Done()
	dir := r.s.releasedPath()
	backoff := retry.Backoff{Min: 50 * time.Millisecond, Max: 2 * time.Second}
	var seen map[string]bool // the last listing; nil: none yet
	fails := 0
	for {
		select {
		case <-r.stop:
			return
		default:
		}
		names, _, ch, err := r.s.conn.ChildrenW(dir)
		if errors.Is(err, zk.ErrNoNode) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err = r.s.ensureReleased(ctx)
			cancel()
			if err == nil {
				continue
			}
		}
		if err != nil {
			select {
			case <-r.stop:
				return
			case <-time.After(backoff.Delay(fails)):
			}
			fails++
			continue
		}
		fails = 0
		now := make(map[string]bool, len(names))
		r.mu.Lock()
		for _, name := range names {
			now[name] = true
			if seen == nil || seen[name] {
				continue
			}
			if task, id, ok := noticeSlot(name); ok {
				for _, f := range r.fs {
					f(task, id)
				}
			}
		}
		select {
		case <-r.ready:
		default:
			close(r.ready)
		}
		r.mu.Unlock()
		seen = now
		select {
		case <-r.stop:
			return
		case <-ch: // a child created or deleted, or the watch lost: list again
		}
	}
}
