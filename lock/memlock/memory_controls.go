package memlock

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/internal/schema"
)

var _ lock.Controls = (*Store)(nil)

// Trigger implements Controls; it is trigger.lua. The pending triggers are
// kept as one value, "<sec>@<ms> ...", oldest first; the idempotency keys
// as another, a line "<sec> <quoted key>" each, oldest first.
func (m *Store) Trigger(ctx context.Context, task, key string, window time.Duration) (lock.Trigger, error) {
	if err := ctx.Err(); err != nil {
		return lock.Trigger{}, fmt.Errorf("lock: trigger %s: %w", task, err)
	}
	triggers, _, _, notice := schema.ControlKeys("slotd", task)
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	idem := schema.TriggerKeys("slotd", task)
	var seen []string
	if key != "" {
		e, _ := m.get(idem, now)
		oldest := now.Add(-lock.TriggerTTL).Unix()
		for _, line := range strings.Split(e.value, "\n") {
			s, q, ok := strings.Cut(line, " ")
			sec, err := strconv.ParseInt(s, 10, 64)
			if !ok || err != nil || sec < oldest {
				continue
			}
			if k, err := strconv.Unquote(q); err == nil && k == key {
				return lock.Trigger{Result: lock.Repeated, Time: time.Unix(sec, 0).UTC()}, nil
			}
			seen = append(seen, line)
		}
	}
	list := m.triggers(triggers, now)
	cut := now.Add(-window).UnixMilli()
	list = slices.DeleteFunc(list, func(t [2]int64) bool { return t[1] <= cut })
	sec := now.Unix()
	out := lock.Trigger{Result: lock.Coalesced, Time: time.Unix(sec, 0).UTC()}
	if !slices.ContainsFunc(list, func(t [2]int64) bool { return t[0] == sec }) {
		list = append(list, [2]int64{sec, now.UnixMilli()})
		out.Result = lock.Started
	}
	parts := make([]string, len(list))
	for i, t := range list {
		parts[i] = strconv.FormatInt(t[0], 10) + "@" + strconv.FormatInt(t[1], 10)
	}
	m.set(triggers, strings.Join(parts, " "), lock.TriggerTTL, now)
	if key != "" {
		seen = append(seen[max(0, len(seen)-lock.MaxTriggerKeys+1):], strconv.FormatInt(sec, 10)+" "+strconv.Quote(key))
		m.set(idem, strings.Join(seen, "\n"), lock.TriggerTTL, now)
	}
	if out.Result == lock.Started {
		m.watch.Notify(notice, lock.Released)
		m.bump(now)
	}
	return out, nil
}

// triggers decodes the pending triggers under key, {sec, ms} each.
// Called with m.mu held.
func (m *Store) triggers(key string, now time.Time) [][2]int64 {
	e, ok := m.get(key, now)
	if !ok || e.value == "" {
		return nil
	}
	var out [][2]int64
	for _, f := range strings.Fields(e.value) {
		s, ms, _ := strings.Cut(f, "@")
		a, _ := strconv.ParseInt(s, 10, 64)
		b, _ := strconv.ParseInt(ms, 10, 64)
		out = append(out, [2]int64{a, b})
	}
	return out
}

// Triggers implements Controls.
func (m *Store) Triggers(ctx context.Context, tasks []string) ([][]time.Time, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("lock: triggers of %d tasks: %w", len(tasks), err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([][]time.Time, len(tasks))
	for i, task := range tasks {
		triggers, _, _, _ := schema.ControlKeys("slotd", task)
		for _, t := range m.triggers(triggers, m.now()) {
			out[i] = append(out[i], time.Unix(t[0], 0).UTC())
		}
	}
	return out, nil
}

// ArmTrigger implements Controls; it is arm.lua.
func (m *Store) ArmTrigger(ctx context.Context, slot lock.Slot, doneTTL time.Duration) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("lock: arm trigger %s: %w", slot, err)
	}
	state, attempts := schema.Keys("slotd", slot)
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if _, ok := m.get(attempts, now); ok {
		return nil
	}
	base := strconv.Itoa(lock.TriggerBase)
	m.set(attempts, base, doneTTL, now)
	m.set(schema.BaseKey(state), base, doneTTL, now)
	return nil
}

// SetPaused implements Controls; it is pause.lua.
func (m *Store) SetPaused(ctx context.Context, task string, op lock.PauseOp) (bool, error) {
	if _, err := schema.PauseArg(op); err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("lock: pause state of %s: %w", task, err)
	}
	_, key, _, notice := schema.ControlKeys("slotd", task)
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	e, had := m.get(key, now)
	want := "paused"
	switch {
	case op == lock.Resume:
		want = "resumed"
	case op == lock.Seed && had:
		want = e.value
	}
	m.set(key, want, lock.PauseTTL, now)
	if !had || e.value != want {
		m.watch.Notify(notice, lock.Released)
		m.bump(now)
	}
	return want == "paused", nil
}

// Configure implements Controls; it is pause.lua's "config" for each task.
func (m *Store) Configure(ctx context.Context, tasks []string, paused []bool) ([]bool, error) {
	if len(paused) != len(tasks) {
		return nil, fmt.Errorf("lock: configure %d tasks with %d values", len(tasks), len(paused))
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("lock: configure pause of %d tasks: %w", len(tasks), err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	out := make([]bool, len(tasks))
	bumped := false
	for i, task := range tasks {
		_, key, _, notice := schema.ControlKeys("slotd", task)
		cfg, file := schema.PauseConfigKey("slotd", task), schema.PauseValue(paused[i])
		e, had := m.get(key, now)
		applied, wasApplied := m.get(cfg, now)
		m.set(cfg, file, lock.PauseTTL, now)
		want := file
		switch {
		case wasApplied && applied.value != file:
		case had:
			want = e.value
		case !paused[i]:
			continue // nothing recorded, nothing to pause
		}
		m.set(key, want, lock.PauseTTL, now)
		out[i] = want == "paused"
		if !had || e.value != want {
			m.watch.Notify(notice, lock.Released)
			if !bumped {
				bumped = true
				m.bump(now)
			}
		}
	}
	return out, nil
}

// Paused implements Controls.
func (m *Store) Paused(ctx context.Context, tasks []string, renew bool) ([]bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("lock: pause state of %d tasks: %w", len(tasks), err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	out := make([]bool, len(tasks))
	for i, task := range tasks {
		_, key, _, _ := schema.ControlKeys("slotd", task)
		e, ok := m.get(key, now)
		if !ok {
			continue
		}
		switch e.value {
		case "paused":
			out[i] = true
		case "resumed":
		default:
			return nil, fmt.Errorf("lock: pause state of %s (key %s): %w: %q", task, key, lock.ErrForeign, e.value)
		}
		if renew {
			m.set(key, e.value, lock.PauseTTL, now)
			if c, ok := m.get(schema.PauseConfigKey("slotd", task), now); ok {
				m.set(schema.PauseConfigKey("slotd", task), c.value, lock.PauseTTL, now)
			}
		}
	}
	return out, nil
}

// Occupy implements Controls; it is occupy.lua.
func (m *Store) Occupy(ctx context.Context, slot lock.Slot, owner lock.Owner, lease time.Duration, replace bool) (lock.Occupancy, error) {
	if err := ctx.Err(); err != nil {
		return lock.Occupancy{}, fmt.Errorf("lock: occupy %s attempt %d: %w", slot, owner.Attempt, err)
	}
	_, _, running, notice := schema.ControlKeys("slotd", slot.Task)
	me := schema.Occupant(slot, owner)
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	e, ok := m.get(running, now)
	if ok && e.value != me && schema.OccupantSlot(e.value) != slot.ID {
		out := lock.Occupancy{Other: schema.OccupantSlot(e.value), Value: e.value}
		if !replace {
			out.TTL = e.expires.Sub(now)
			return out, nil
		}
		m.set(running, me, lease, now)
		m.set(schema.ReplacedKey(running), e.value, lease, now)
		m.watch.Notify(notice, lock.Released)
		out.Taken = true
		return out, nil
	}
	m.set(running, me, lease, now)
	if r, ok := m.get(schema.ReplacedKey(running), now); replace && ok && schema.OccupantSlot(r.value) != slot.ID {
		return lock.Occupancy{Taken: true, Other: schema.OccupantSlot(r.value), Value: r.value}, nil
	}
	return lock.Occupancy{Taken: true}, nil
}

// RenewOccupancy implements Controls.
func (m *Store) RenewOccupancy(ctx context.Context, slot lock.Slot, owner lock.Owner, lease time.Duration) error {
	return m.occupied(ctx, "renew running record of", slot, owner, func(key string, now time.Time) {
		m.set(key, schema.Occupant(slot, owner), lease, now)
	})
}

// Vacate implements Controls.
func (m *Store) Vacate(ctx context.Context, slot lock.Slot, owner lock.Owner) error {
	err := m.occupied(ctx, "vacate running record of", slot, owner, func(key string, _ time.Time) {
		delete(m.keys, key)
	})
	if err != nil && ctx.Err() == nil {
		return nil // replaced or expired: nothing of ours to remove
	}
	return err
}

// occupied runs write under the lock if owner's attempt of slot is the
// task's running record.
func (m *Store) occupied(ctx context.Context, op string, slot lock.Slot, owner lock.Owner, write func(key string, now time.Time)) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("lock: %s %s attempt %d: %w", op, slot, owner.Attempt, err)
	}
	_, _, running, _ := schema.ControlKeys("slotd", slot.Task)
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if e, ok := m.get(running, now); !ok || e.value != schema.Occupant(slot, owner) {
		return fmt.Errorf("lock: %s %s attempt %d: %w", op, slot, owner.Attempt, lock.ErrNotHeld)
	}
	write(running, now)
	return nil
}

// WatchTask implements Controls.
func (m *Store) WatchTask(task string) *lock.Watch {
	_, _, _, notice := schema.ControlKeys("slotd", task)
	return m.watchKey(notice)
}

// bump changes the epoch; called with m.mu held.
func (m *Store) bump(now time.Time) {
	key := schema.EpochKey("slotd")
	n := 0
	if e, ok := m.get(key, now); ok {
		n, _ = strconv.Atoi(e.value)
	}
	m.set(key, strconv.Itoa(n+1), lock.PauseTTL, now)
}

// Epoch implements Controls.
func (m *Store) Epoch(ctx context.Context) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("lock: controls epoch: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.get(schema.EpochKey("slotd"), m.now())
	if !ok {
		return 0, nil
	}
	n, _ := strconv.ParseInt(e.value, 10, 64)
	return n, nil
}
