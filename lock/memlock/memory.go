package memlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/internal/kv"
	"github.com/slotd/slotd/lock/internal/notify"
	"github.com/slotd/slotd/lock/internal/schema"
)

// Store is the slot protocol in this process's memory: the embedded store
// for a single replica trying slotd out, and a fast store for unit tests. It
// follows the Lua scripts step for step and passes the same conformance
// suite as Redis; it shares nothing between processes.
type Store struct {
	now func() time.Time

	mu    sync.Mutex
	keys  map[string]entry
	swept int // len(keys) after its last sweep
	watch notify.Watchers

	kvFleet *kv.Fleet // the fleet over package kv's primitive (fleet.go), built in New
}

type entry struct {
	value   string
	expires time.Time
}

// New returns an empty store whose clock is now (time.Now if nil).
func New(now func() time.Time) *Store {
	if now == nil {
		now = time.Now
	}
	m := &Store{now: now, keys: map[string]entry{}}
	m.kvFleet = kv.NewFleet(memKV{m}, false)
	return m
}

// get returns key's value, expiring it first if its time has come.
// Called with m.mu held.
func (m *Store) get(key string, now time.Time) (entry, bool) {
	e, ok := m.keys[key]
	if ok && !now.Before(e.expires) {
		delete(m.keys, key)
		return entry{}, false
	}
	return e, ok
}

// set writes key, to expire ttl from now. Called with m.mu held.
func (m *Store) set(key, value string, ttl time.Duration, now time.Time) {
	m.keys[key] = entry{value: value, expires: now.Add(ttl)}
	if len(m.keys) >= 2*max(m.swept, 1024) {
		// A key is expired by get only when read again, and most are
		// not (a slot's done marker, once its window has passed): the
		// expired are swept when the keys have doubled since the last
		// sweep, so that a long-running replica holds the live keys, not
		// every key it wrote.
		for k, e := range m.keys {
			if !now.Before(e.expires) {
				delete(m.keys, k)
			}
		}
		m.swept = len(m.keys)
	}
}

// Claim implements Store; it is claim.lua.
func (m *Store) Claim(ctx context.Context, slot lock.Slot, replica string, p lock.Policy) (lock.Claim, error) {
	if err := ctx.Err(); err != nil {
		return lock.Claim{}, fmt.Errorf("lock: claim %s: %w", slot, err)
	}
	sent := time.Now()
	state, attempts := schema.Keys("slotd", slot)
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	c := lock.Claim{Now: now.UTC(), Sent: sent}
	if e, ok := m.get(state, now); ok {
		v, err := lock.ParseValue(e.value)
		switch {
		case err != nil:
			return lock.Claim{}, fmt.Errorf("lock: claim %s: %w", slot, err)
		case v.NotBefore.IsZero():
			st := v.State()
			c.Holder, c.Instance, c.Attempt = st.Holder, st.Instance, st.Attempt
			if st.Status == "done" {
				c.Result = lock.Done
			} else {
				c.Result, c.Wait = lock.Held, e.expires.Sub(now)
			}
			return c, nil
		}
		// A retry backoff: early (or late) until it ends, then free.
		if bc, waits := c.AfterBackoff(slot, v, now); waits {
			return bc, nil
		}
	}
	if earliest := slot.Time.Add(-p.Tolerance); now.Before(earliest) {
		c.Result, c.Wait = lock.Early, earliest.Sub(now)
		return c, nil
	}
	if !now.Before(slot.Deadline) {
		c.Result = lock.Late
		return c, nil
	}
	n, base := 0, 0
	for key, dst := range map[string]*int{attempts: &n, schema.BaseKey(state): &base} {
		if e, ok := m.get(key, now); ok {
			var err error
			if *dst, err = strconv.Atoi(e.value); err != nil {
				return lock.Claim{}, fmt.Errorf("lock: claim %s: %s %w: %q", slot, key, lock.ErrForeign, e.value)
			}
		}
	}
	c.Base = base
	if n-base >= p.MaxAttempts || n >= lock.MaxAttempts {
		c.Result, c.Attempt = lock.Exhausted, n
		return c, nil
	}
	// The counter outlives the window and lives at least the done TTL
	// from here; the completion does not touch it (claim.lua).
	n++
	ttl := max(p.DoneTTL, slot.Deadline.Sub(now))
	m.set(attempts, strconv.Itoa(n), ttl, now)
	if base > 0 {
		m.set(schema.BaseKey(state), strconv.Itoa(base), ttl, now)
	}
	owner := lock.Owner{ID: replica, Attempt: n}
	m.set(state, schema.Run(owner), p.Lease, now)
	c.Result, c.Attempt = lock.Won, n
	return c, nil
}

// Renew implements Store; it is renew.lua.
func (m *Store) Renew(ctx context.Context, slot lock.Slot, owner lock.Owner, lease time.Duration) error {
	return m.compare(ctx, "renew", slot, owner, func(state string, now time.Time) {
		m.set(state, schema.Run(owner), lease, now)
	})
}

// Complete implements Store; it is complete.lua.
func (m *Store) Complete(ctx context.Context, slot lock.Slot, owner lock.Owner, doneTTL time.Duration) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("lock: complete %s attempt %d: %w", slot, owner.Attempt, err)
	}
	state, _ := schema.Keys("slotd", slot)
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	e, ok := m.get(state, now)
	switch {
	case ok && e.value == schema.Run(owner):
		m.set(state, schema.DonePrefix(owner)+strconv.FormatInt(now.UnixMilli(), 10), doneTTL, now)
		m.watch.Notify(state, lock.Completed)
		return nil
	case ok && strings.HasPrefix(e.value, schema.DonePrefix(owner)):
		return nil // completed already: a retry after a lost reply
	}
	return fmt.Errorf("lock: complete %s attempt %d: %w", slot, owner.Attempt, lock.ErrNotHeld)
}

// Release implements Store; it is release.lua.
func (m *Store) Release(ctx context.Context, slot lock.Slot, owner lock.Owner) error {
	return m.compare(ctx, "release", slot, owner, func(state string, _ time.Time) {
		delete(m.keys, state)
		m.watch.Notify(state, lock.Released)
	})
}

// ReleaseAfter implements lock.Store; it is release.lua with a delay:
// the state becomes a backoff value that expires at its not-before time.
func (m *Store) ReleaseAfter(ctx context.Context, slot lock.Slot, owner lock.Owner, delay time.Duration) error {
	if delay <= 0 {
		return m.Release(ctx, slot, owner)
	}
	return m.compare(ctx, "release", slot, owner, func(state string, now time.Time) {
		m.set(state, lock.Value{NotBefore: now.Add(delay)}.String(), delay, now)
		m.watch.Notify(state, lock.Released)
	})
}

// compare runs write under the lock if owner holds slot.
func (m *Store) compare(ctx context.Context, op string, slot lock.Slot, owner lock.Owner, write func(state string, now time.Time)) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("lock: %s %s attempt %d: %w", op, slot, owner.Attempt, err)
	}
	state, _ := schema.Keys("slotd", slot)
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if e, ok := m.get(state, now); !ok || e.value != schema.Run(owner) {
		return fmt.Errorf("lock: %s %s attempt %d: %w", op, slot, owner.Attempt, lock.ErrNotHeld)
	}
	write(state, now)
	return nil
}

// Rerun implements Store; it is rerun.lua.
func (m *Store) Rerun(ctx context.Context, slot lock.Slot, force bool) (lock.Rerun, error) {
	if err := ctx.Err(); err != nil {
		return lock.Rerun{}, fmt.Errorf("lock: rerun %s: %w", slot, err)
	}
	state, attempts := schema.Keys("slotd", slot)
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	var out lock.Rerun
	if e, ok := m.get(state, now); ok {
		out.Previous = e.value
		if !force && !strings.HasPrefix(e.value, "done:") && !strings.HasPrefix(e.value, lock.BackoffPrefix) {
			out.Refused, out.TTL = "foreign", e.expires.Sub(now)
			if strings.HasPrefix(e.value, "run:") {
				out.Refused = "running"
			}
			if a, ok := m.get(attempts, now); ok {
				out.Attempts, _ = strconv.Atoi(a.value)
			}
			return out, nil
		}
	}
	delete(m.keys, state)
	if a, ok := m.get(attempts, now); ok {
		if n, err := strconv.Atoi(a.value); err == nil {
			out.Attempts = n
			m.keys[schema.BaseKey(state)] = entry{value: a.value, expires: a.expires}
		} else {
			delete(m.keys, attempts)
			delete(m.keys, schema.BaseKey(state))
		}
	} else {
		delete(m.keys, schema.BaseKey(state))
	}
	out.Cleared, out.Woken = true, int64(m.watch.Len(state))
	m.watch.Notify(state, lock.Released)
	return out, nil
}

// States implements Store.
func (m *Store) States(ctx context.Context, slots []lock.Slot) ([]lock.State, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("lock: state of %d slots: %w", len(slots), err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	out := make([]lock.State, len(slots))
	var errs []error
	for i, slot := range slots {
		state, attempts := schema.Keys("slotd", slot)
		e, ok := m.get(state, now)
		c, cok := m.get(attempts, now)
		st, err := schema.DecodeState(e.value, ok, c.value, cok, e.expires.Sub(now))
		if err != nil {
			errs = append(errs, fmt.Errorf("lock: state %s: %w", slot, err))
		}
		out[i] = st
	}
	return out, errors.Join(errs...)
}

// Time implements Store with the store's clock.
func (m *Store) Time(ctx context.Context) (time.Time, error) {
	return m.now().UTC(), ctx.Err()
}

// Watch implements Store.
func (m *Store) Watch(slot lock.Slot) *lock.Watch {
	key, _ := schema.Keys("slotd", slot)
	return m.watchKey(key)
}

// Peek implements lock.Peeker: in memory a States read is as cheap as
// any, every running slot's TTL included.
func (m *Store) Peek(ctx context.Context, slots []lock.Slot, ttl []bool) ([]lock.State, error) {
	if ttl != nil && len(ttl) != len(slots) {
		return nil, fmt.Errorf("lock: peek at %d slots: %d TTL flags", len(slots), len(ttl))
	}
	return m.States(ctx, slots)
}

// WatchReleases implements lock.Peeker.
func (m *Store) WatchReleases(f func(task, id string)) (stop func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.watch.OnRelease(func(key string) {
		if task, id, ok := schema.SlotOf("slotd", key); ok {
			f(task, id)
		}
	})
	return sync.OnceFunc(func() {
		m.mu.Lock()
		m.watch.OffRelease(p)
		m.mu.Unlock()
	})
}

// watchKey watches the notifications naming key.
func (m *Store) watchKey(key string) *lock.Watch {
	var w *lock.Watch
	w = lock.NewWatch(func() {
		m.mu.Lock()
		m.watch.Remove(key, w)
		m.mu.Unlock()
	})
	m.mu.Lock()
	m.watch.Add(key, w)
	m.mu.Unlock()
	return w
}

// TTLs returns every live key with its remaining time to live, for tests
// that check nothing is left without one.
func (m *Store) TTLs() map[string]time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	out := map[string]time.Duration{}
	for k := range m.keys {
		if e, ok := m.get(k, now); ok {
			out[k] = e.expires.Sub(now)
		}
	}
	return out
}

// Set writes a raw key, for tests that plant foreign values.
func (m *Store) Set(key, value string, ttl time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.set(key, value, ttl, m.now())
}
