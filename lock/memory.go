package lock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Memory is the slot protocol in this process's memory: the embedded store
// for a single replica trying slotd out, and a fast store for unit tests. It
// follows the Lua scripts step for step and passes the same conformance
// suite as Redis; it shares nothing between processes.
type Memory struct {
	now func() time.Time

	mu    sync.Mutex
	keys  map[string]entry
	watch watchers
}

type entry struct {
	value   string
	expires time.Time
}

// NewMemory returns an empty store whose clock is now (time.Now if nil).
func NewMemory(now func() time.Time) *Memory {
	if now == nil {
		now = time.Now
	}
	return &Memory{now: now, keys: map[string]entry{}}
}

// get returns key's value, expiring it first if its time has come.
// Called with m.mu held.
func (m *Memory) get(key string, now time.Time) (entry, bool) {
	e, ok := m.keys[key]
	if ok && !now.Before(e.expires) {
		delete(m.keys, key)
		return entry{}, false
	}
	return e, ok
}

func (m *Memory) set(key, value string, ttl time.Duration, now time.Time) {
	m.keys[key] = entry{value: value, expires: now.Add(ttl)}
}

// Claim implements Store; it is claim.lua.
func (m *Memory) Claim(ctx context.Context, slot Slot, replica string, p Policy) (Claim, error) {
	if err := ctx.Err(); err != nil {
		return Claim{}, fmt.Errorf("lock: claim %s: %w", slot, err)
	}
	sent := time.Now()
	state, attempts := Keys("slotd", slot)
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	c := Claim{Now: now.UTC(), Sent: sent}
	if e, ok := m.get(state, now); ok {
		st, err := parseValue(e.value)
		if err != nil {
			return Claim{}, fmt.Errorf("lock: claim %s: %w", slot, err)
		}
		c.Holder, c.Instance, c.Attempt = st.Holder, st.Instance, st.Attempt
		if st.Status == "done" {
			c.Result = Done
		} else {
			c.Result, c.Wait = Held, e.expires.Sub(now)
		}
		return c, nil
	}
	if earliest := slot.Time.Add(-p.Tolerance); now.Before(earliest) {
		c.Result, c.Wait = Early, earliest.Sub(now)
		return c, nil
	}
	if !now.Before(slot.Deadline) {
		c.Result = Late
		return c, nil
	}
	n, base := 0, 0
	for key, dst := range map[string]*int{attempts: &n, baseKey(state): &base} {
		if e, ok := m.get(key, now); ok {
			var err error
			if *dst, err = strconv.Atoi(e.value); err != nil {
				return Claim{}, fmt.Errorf("lock: claim %s: %s %w: %q", slot, key, ErrForeign, e.value)
			}
		}
	}
	c.Base = base
	if n-base >= p.MaxAttempts || n >= MaxAttempts {
		c.Result, c.Attempt = Exhausted, n
		return c, nil
	}
	n++
	m.set(attempts, strconv.Itoa(n), p.DoneTTL, now)
	if base > 0 {
		m.set(baseKey(state), strconv.Itoa(base), p.DoneTTL, now)
	}
	owner := Owner{Replica: replica, Attempt: n}
	m.set(state, owner.value(), p.Lease, now)
	c.Result, c.Attempt = Won, n
	return c, nil
}

// Renew implements Store; it is renew.lua.
func (m *Memory) Renew(ctx context.Context, slot Slot, owner Owner, lease time.Duration) error {
	return m.compare(ctx, "renew", slot, owner, func(state string, now time.Time) {
		m.set(state, owner.value(), lease, now)
	})
}

// Complete implements Store; it is complete.lua.
func (m *Memory) Complete(ctx context.Context, slot Slot, owner Owner, doneTTL time.Duration) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("lock: complete %s attempt %d: %w", slot, owner.Attempt, err)
	}
	state, attempts := Keys("slotd", slot)
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	e, ok := m.get(state, now)
	switch {
	case ok && e.value == owner.value():
		m.set(state, owner.donePrefix()+strconv.FormatInt(now.UnixMilli(), 10), doneTTL, now)
		m.watch.notify(state, true)
		for _, k := range []string{attempts, baseKey(state)} {
			if a, ok := m.get(k, now); ok {
				m.set(k, a.value, doneTTL, now)
			}
		}
		return nil
	case ok && strings.HasPrefix(e.value, owner.donePrefix()):
		return nil // completed already: a retry after a lost reply
	}
	return fmt.Errorf("lock: complete %s attempt %d: %w", slot, owner.Attempt, ErrNotHeld)
}

// Release implements Store; it is release.lua.
func (m *Memory) Release(ctx context.Context, slot Slot, owner Owner) error {
	return m.compare(ctx, "release", slot, owner, func(state string, _ time.Time) {
		delete(m.keys, state)
		m.watch.notify(state, false)
	})
}

// compare runs write under the lock if owner holds slot.
func (m *Memory) compare(ctx context.Context, op string, slot Slot, owner Owner, write func(state string, now time.Time)) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("lock: %s %s attempt %d: %w", op, slot, owner.Attempt, err)
	}
	state, _ := Keys("slotd", slot)
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if e, ok := m.get(state, now); !ok || e.value != owner.value() {
		return fmt.Errorf("lock: %s %s attempt %d: %w", op, slot, owner.Attempt, ErrNotHeld)
	}
	write(state, now)
	return nil
}

// Rerun implements Store; it is rerun.lua.
func (m *Memory) Rerun(ctx context.Context, slot Slot, force bool) (Rerun, error) {
	if err := ctx.Err(); err != nil {
		return Rerun{}, fmt.Errorf("lock: rerun %s: %w", slot, err)
	}
	state, attempts := Keys("slotd", slot)
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	var out Rerun
	if e, ok := m.get(state, now); ok {
		out.Previous = e.value
		if !force && !strings.HasPrefix(e.value, "done:") {
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
			m.keys[baseKey(state)] = entry{value: a.value, expires: a.expires}
		} else {
			delete(m.keys, attempts)
			delete(m.keys, baseKey(state))
		}
	} else {
		delete(m.keys, baseKey(state))
	}
	out.Cleared, out.Woken = true, int64(len(m.watch.m[state]))
	m.watch.notify(state, false)
	return out, nil
}

// States implements Store.
func (m *Memory) States(ctx context.Context, slots []Slot) ([]State, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("lock: state of %d slots: %w", len(slots), err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	out := make([]State, len(slots))
	var errs []error
	for i, slot := range slots {
		state, attempts := Keys("slotd", slot)
		e, ok := m.get(state, now)
		c, cok := m.get(attempts, now)
		st, err := decodeState(e.value, ok, c.value, cok, e.expires.Sub(now))
		if err != nil {
			errs = append(errs, fmt.Errorf("lock: state %s: %w", slot, err))
		}
		out[i] = st
	}
	return out, errors.Join(errs...)
}

// Time implements Store with the store's clock.
func (m *Memory) Time(ctx context.Context) (time.Time, error) {
	return m.now().UTC(), ctx.Err()
}

// Watch implements Store.
func (m *Memory) Watch(slot Slot) *Watch {
	key, _ := Keys("slotd", slot)
	return m.watchKey(key)
}

// watchKey watches the notifications naming key.
func (m *Memory) watchKey(key string) *Watch {
	w := &Watch{c: make(chan struct{}, 1)}
	w.stop = sync.OnceFunc(func() {
		m.mu.Lock()
		m.watch.remove(key, w)
		m.mu.Unlock()
	})
	m.mu.Lock()
	m.watch.add(key, w)
	m.mu.Unlock()
	return w
}

// TTLs returns every live key with its remaining time to live, for tests
// that check nothing is left without one.
func (m *Memory) TTLs() map[string]time.Duration {
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
func (m *Memory) Set(key, value string, ttl time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.set(key, value, ttl, m.now())
}
