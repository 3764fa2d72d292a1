package memlock

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/internal/kv"
)

// The fleet (lock.Fleet) in memory: the embedded store's one process is
// its fleet, so what it records is the first start — a fresh embedded
// daemon's slots from before it existed are unscheduled, not missed — and
// its replica id's presence (a second Scheduler on the same Store with the
// same id is refused). It has no live set (lock.Presence.Live is nil): it
// sends no lock.Taken notices, and one process has no peer to defer to.
//
// Keys: "slotd:kv:<dir>/<name>", value "<version>\n<value>" (kv's layout:
// replica/<replica id>, fleet/first-start).

// Announce implements lock.Fleet.
func (m *Store) Announce(ctx context.Context, replica, instance string, ttl time.Duration) (lock.Presence, error) {
	return m.fleet().Announce(ctx, replica, instance, ttl)
}

// Withdraw implements lock.Fleet.
func (m *Store) Withdraw(ctx context.Context, replica, instance string) error {
	return m.fleet().Withdraw(ctx, replica, instance)
}

// Started implements lock.Fleet.
func (m *Store) Started(ctx context.Context, now time.Time) (time.Time, error) {
	return m.fleet().Started(ctx, now)
}

// FirstStart implements lock.Fleet.
func (m *Store) FirstStart(ctx context.Context) (time.Time, error) {
	return m.fleet().FirstStart(ctx)
}

// OnFleetChange implements lock.Fleet: there is no live set, so f is
// never called.
func (m *Store) OnFleetChange(f func()) (stop func()) { return m.fleet().OnFleetChange(f) }

func (m *Store) fleet() *kv.Fleet { return m.kvFleet }

// memKV is kv.Store on the Store's keys.
type memKV struct{ m *Store }

// kvVersion numbers every write of every memKV, so that a version is
// never reused (a name deleted and written again has a new one).
var kvVersion atomic.Int64

func kvKey(dir, name string) string { return "slotd:kv:" + dir + "/" + name }

// read is key's entry; called with m.mu held.
func (s memKV) read(key string, now time.Time) (kv.Entry, error) {
	e, ok := s.m.get(key, now)
	if !ok {
		return kv.Entry{}, nil
	}
	ver, val, found := strings.Cut(e.value, "\n")
	n, err := strconv.ParseInt(ver, 10, 64)
	if !found || err != nil || n <= 0 {
		return kv.Entry{}, fmt.Errorf("key %s: %w: %q", key, lock.ErrForeign, e.value)
	}
	return kv.Entry{Value: val, Version: n, TTL: e.expires.Sub(now)}, nil
}

func (s memKV) Get(ctx context.Context, dir, name string) (kv.Entry, error) {
	if err := ctx.Err(); err != nil {
		return kv.Entry{}, err
	}
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	return s.read(kvKey(dir, name), s.m.now())
}

func (s memKV) List(ctx context.Context, dir string) (map[string]kv.Entry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	now := s.m.now()
	prefix := kvKey(dir, "")
	out := map[string]kv.Entry{}
	for key := range s.m.keys {
		if name, ok := strings.CutPrefix(key, prefix); ok {
			e, err := s.read(key, now)
			if err != nil {
				return nil, err
			}
			if e.Version != 0 {
				out[name] = e
			}
		}
	}
	return out, nil
}

func (s memKV) Put(ctx context.Context, dir, name, value string, version int64, ttl time.Duration) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	now := s.m.now()
	key := kvKey(dir, name)
	e, err := s.read(key, now)
	if err != nil || e.Version != version {
		return false, err
	}
	s.m.set(key, strconv.FormatInt(kvVersion.Add(1), 10)+"\n"+value, ttl, now)
	s.m.watch.Notify(key, lock.Released)
	return true, nil
}

func (s memKV) Delete(ctx context.Context, dir, name string, version int64) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	key := kvKey(dir, name)
	e, err := s.read(key, s.m.now())
	if err != nil || e.Version == 0 || e.Version != version {
		return false, err
	}
	delete(s.m.keys, key)
	s.m.watch.Notify(key, lock.Released)
	return true, nil
}

// OnMembers implements kv.Store; the fleet in memory has no live set to
// watch.
func (memKV) OnMembers(string, func()) (stop func()) { return func() {} }

// OnChange implements kv.Store: a watch of the name's key, which Put and
// Delete notify (an expiry is not noticed: nothing here watches the clock).
func (s memKV) OnChange(dir, name string, f func()) (stop func()) {
	w := s.m.watchKey(kvKey(dir, name))
	w.OnChange(func(lock.Change) { f() })
	return w.Stop
}
