package zklock

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/internal/kv"
)

// The fleet (lock.Fleet) and one-time markers (lock.Oncer) on ZooKeeper,
// over package kv's primitive. A name is a TTL node
// /slotd/.kv/<dir>/<escaped name> whose data is "<TTL ms>\n<value>"; its
// version is its mzxid (unique in the ensemble's history, so a name
// deleted and written again never repeats one), a write a set or delete
// under a check of the node's version read with it. As for the slot
// nodes, an entry has expired when its mtime is its TTL old by a lower
// bound of the leader's clock: the server deletes an expired TTL node only
// at its next sweep. Directories are containers. The live set is the
// children of /slotd/.kv/replica, watched with a child watch; the store
// sends lock.Taken notices for the slots it watches (watch.go).
//
//	/slotd/.kv/replica/<replica id>           the instance nonce of the live process with that id
//	/slotd/.kv/fleet/first-start              the fleet's first start, unix ms
//	/slotd/.kv/once/<task>%2F<slot id>%2F<event>  a slot's one-time marker

// Announce implements lock.Fleet.
func (s *Store) Announce(ctx context.Context, replica, instance string, ttl time.Duration) (lock.Presence, error) {
	return s.fleet().Announce(ctx, replica, instance, ttl)
}

// Withdraw implements lock.Fleet.
func (s *Store) Withdraw(ctx context.Context, replica, instance string) error {
	return s.fleet().Withdraw(ctx, replica, instance)
}

// Started implements lock.Fleet.
func (s *Store) Started(ctx context.Context, now time.Time) (time.Time, error) {
	return s.fleet().Started(ctx, now)
}

// FirstStart implements lock.Fleet.
func (s *Store) FirstStart(ctx context.Context) (time.Time, error) { return s.fleet().FirstStart(ctx) }

// OnFleetChange implements lock.Fleet: a child watch of the replica nodes.
func (s *Store) OnFleetChange(f func()) (stop func()) { return s.fleet().OnFleetChange(f) }

// Once implements lock.Oncer: one create of the marker's TTL node.
func (s *Store) Once(ctx context.Context, slot lock.Slot, event, value string, ttl time.Duration) (bool, error) {
	return kv.Once(ctx, zkKV{s}, slot, event, value, ttl)
}

func (s *Store) fleet() *kv.Fleet { return s.kvFleet }

// zkKV is kv.Store on ZooKeeper.
type zkKV struct{ s *Store }

func (z zkKV) dir(dir string) string { return z.s.root + "/.kv/" + dir }

func (z zkKV) path(dir, name string) string { return z.dir(dir) + "/" + escape(name) }

// read reads path: its entry (Version 0 if absent or expired), stat (nil
// if absent) and the TTL its data records.
func (z zkKV) read(ctx context.Context, path string) (kv.Entry, *zk.Stat, time.Duration, error) {
	type got struct {
		b  []byte
		st *zk.Stat
	}
	g, err := call(ctx, func() (got, error) {
		b, st, err := z.s.conn.Get(path)
		return got{b, st}, err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return kv.Entry{}, nil, 0, nil
	}
	if err != nil {
		return kv.Entry{}, nil, 0, fmt.Errorf("zklock: get %s: %w", path, err)
	}
	ms, val, ok := strings.Cut(string(g.b), "\n")
	n, perr := strconv.ParseInt(ms, 10, 64)
	if !ok || perr != nil || n <= 0 {
		return kv.Entry{}, nil, 0, fmt.Errorf("zklock: get %s: %w: %q", path, lock.ErrForeign, g.b)
	}
	ttl := time.Duration(n) * time.Millisecond
	lo, _, err := z.s.now(ctx)
	if err != nil {
		return kv.Entry{}, nil, 0, err
	}
	// lo may read below the node's mtime (the bound is the leader's clock
	// less the round trip it was read in), yet no entry has more than its
	// TTL left.
	left := min(ttl-lo.Sub(time.UnixMilli(g.st.Mtime)), ttl)
	if left <= 0 {
		return kv.Entry{}, g.st, ttl, nil
	}
	return kv.Entry{Value: val, Version: g.st.Mzxid, TTL: left}, g.st, ttl, nil
}

func (z zkKV) Get(ctx context.Context, dir, name string) (kv.Entry, error) {
	e, _, _, err := z.read(ctx, z.path(dir, name))
	return e, err
}

// List implements kv.Store: the children, then each one's data, read
// together.
func (z zkKV) List(ctx context.Context, dir string) (map[string]kv.Entry, error) {
	p := z.dir(dir)
	names, err := call(ctx, func() ([]string, error) {
		names, _, err := z.s.conn.Children(p)
		return names, err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return map[string]kv.Entry{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("zklock: list %s: %w", p, err)
	}
	entries := make([]kv.Entry, len(names))
	if err := readAll(len(names), func(i int) (err error) {
		entries[i], _, _, err = z.read(ctx, p+"/"+names[i])
		return err
	}); err != nil {
		return nil, err
	}
	out := make(map[string]kv.Entry, len(names))
	for i, n := range names {
		name, uerr := url.PathUnescape(n)
		if entries[i].Version != 0 && uerr == nil {
			out[name] = entries[i]
		}
	}
	return out, nil
}

// listFan is how many nodes readAll reads at once.
const listFan = 64

// readAll calls read for 0 to n-1, listFan at a time, and joins their
// errors: the reads go out together, and one session pipelines them.
func readAll(n int, read func(i int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, listFan)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			errs[i] = read(i)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// afterPutRead, set by a test, runs in Put between its read of a present
// node and its write: where the server's sweep of an expired TTL node may
// fall, which a test cannot otherwise time.
var afterPutRead atomic.Pointer[func(path string)]

func (z zkKV) Put(ctx context.Context, dir, name, value string, version int64, ttl time.Duration) (bool, error) {
	p := z.path(dir, name)
	data := []byte(strconv.FormatInt(ttl.Milliseconds(), 10) + "\n" + value)
	e, st, old, err := z.read(ctx, p)
	if err != nil || e.Version != version {
		return false, err
	}
	if f := afterPutRead.Load(); f != nil && st != nil {
		(*f)(p)
	}
	if st != nil {
		// Present (live at version, or expired). A set keeps the node's
		// own TTL, fixed at its creation: rewrite it if ttl differs. An
		// expired node the server's sweep deletes after the read is
		// absent, as the caller asked: create it.
		swept := func(err error) bool { return e.Version == 0 && errors.Is(err, zk.ErrNoNode) }
		if old == time.Duration(ttl.Milliseconds())*time.Millisecond {
			_, err := call(ctx, func() (*zk.Stat, error) { return z.s.conn.Set(p, data, st.Version) })
			if !swept(err) {
				return z.lost(p, err)
			}
		} else {
			_, err := call(ctx, func() (struct{}, error) { return struct{}{}, z.s.conn.Delete(p, st.Version) })
			if ok, lerr := z.lost(p, err); !ok && !swept(err) {
				return false, lerr
			}
		}
	}
	return z.create(ctx, dir, p, data, ttl)
}

// create creates path, a TTL node of dir, creating the containers above
// it if they are missing; it reports false if path exists.
func (z zkKV) create(ctx context.Context, dir, path string, data []byte, ttl time.Duration) (bool, error) {
	for try := 0; ; try++ {
		_, err := call(ctx, func() (string, error) { return z.s.conn.CreateTTL(path, data, zk.FlagTTL, z.s.acl, ttl) })
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, zk.ErrNodeExists):
			return false, nil
		case errors.Is(err, zk.ErrNoNode) && try < 3:
			for _, c := range []string{z.s.root, z.s.root + "/.kv", z.dir(dir)} {
				_, err := call(ctx, func() (string, error) { return z.s.conn.CreateContainer(c, nil, zk.FlagContainer, z.s.acl) })
				if err != nil && !errors.Is(err, zk.ErrNodeExists) {
					return false, fmt.Errorf("zklock: create %s: %w", c, err)
				}
			}
		case errors.Is(err, zk.ErrUnknown), errors.Is(err, zk.ErrBadArguments):
			return false, fmt.Errorf("zklock: create %s: %w (%w)", path, ErrNoTTL, err)
		default:
			return false, fmt.Errorf("zklock: create %s: %w", path, err)
		}
	}
}

// lost maps a version-checked write's error: a node changed or gone in
// between is a lost compare-and-set, not an error.
func (z zkKV) lost(path string, err error) (bool, error) {
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, zk.ErrBadVersion), errors.Is(err, zk.ErrNoNode):
		return false, nil
	}
	return false, fmt.Errorf("zklock: write %s: %w", path, err)
}

func (z zkKV) Delete(ctx context.Context, dir, name string, version int64) (bool, error) {
	p := z.path(dir, name)
	e, st, _, err := z.read(ctx, p)
	if err != nil || e.Version == 0 || e.Version != version {
		return false, err
	}
	_, err = call(ctx, func() (struct{}, error) { return struct{}{}, z.s.conn.Delete(p, st.Version) })
	return z.lost(p, err)
}

// OnMembers implements kv.Store with a child watch of dir (an exists
// watch while dir is missing).
func (z zkKV) OnMembers(dir string, f func()) (stop func()) {
	p := z.dir(dir)
	return z.watch(func(ctx context.Context) (<-chan zk.Event, error) {
		for {
			ch, err := call(ctx, func() (<-chan zk.Event, error) {
				_, _, ch, err := z.s.conn.ChildrenW(p)
				return ch, err
			})
			if !errors.Is(err, zk.ErrNoNode) {
				return ch, err
			}
			type exists struct {
				ok bool
				ch <-chan zk.Event
			}
			e, err := call(ctx, func() (exists, error) {
				ok, _, ch, err := z.s.conn.ExistsW(p)
				return exists{ok, ch}, err
			})
			if err != nil || !e.ok {
				return e.ch, err
			}
			// created in between: watch its children
		}
	}, f)
}

// OnChange implements kv.Store with an exists watch of the name's node,
// which fires when it is created, set or deleted.
func (z zkKV) OnChange(dir, name string, f func()) (stop func()) {
	p := z.path(dir, name)
	return z.watch(func(ctx context.Context) (<-chan zk.Event, error) {
		return call(ctx, func() (<-chan zk.Event, error) {
			_, _, ch, err := z.s.conn.ExistsW(p)
			return ch, err
		})
	}, f)
}

// watch arms a ZooKeeper watch with arm, calls f when it fires, and arms
// it again; a lost watch (no connection, a new session) calls f too, in
// case a change fell in between. It returns once the first watch is armed
// (or after a few seconds without an answer).
func (z zkKV) watch(arm func(context.Context) (<-chan zk.Event, error), f func()) (stop func()) {
	done := make(chan struct{})
	ready := make(chan struct{})
	w := &z.s.watch
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return func() {}
	}
	w.wg.Add(1)
	w.mu.Unlock()
	// ctx ends the calls in flight at stop or Close: a call waiting for a
	// connection must not hold Close up.
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		defer w.wg.Done()
		defer cancel()
		first := true
		for {
			ch, err := arm(ctx)
			if first {
				first = false
				close(ready)
			}
			var retry <-chan time.Time
			if err != nil { // the connection is down: try again in a while
				ch = nil
				retry = time.After(time.Second)
			}
			select {
			case <-done:
				return
			case <-w.stop:
				return
			case <-ch:
				f()
			case <-retry:
			}
		}
	}()
	go func() {
		select {
		case <-done:
		case <-w.stop:
		}
		cancel()
	}()
	select {
	case <-ready:
	case <-time.After(5 * time.Second):
	}
	return sync.OnceFunc(func() { close(done) })
}
