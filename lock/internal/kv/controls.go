package kv

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/internal/schema"
)

// The operator controls' layout over Store (the values are Redis's, one
// name where Redis keeps a sorted set):
//
//	triggers/<task>        pending triggers and idempotency keys (TTL lock.TriggerTTL): a first
//	                       line "<unix s>@<unix ms> ...", oldest first, then a line
//	                       "<unix s> <quoted key>" per key, oldest first (at most lock.MaxTriggerKeys)
//	paused/<task>          "paused" or "resumed" (TTL lock.PauseTTL, renewed by every live replica)
//	paused-config/<task>   the config's paused value last applied, "paused" or "resumed" (as the state)
//	running/<task>         "<slot id> run:<owner>:<attempt>": the attempt that runs the task (TTL lease)
//	replaced/<task>        the running record a replace last took the place of (TTL lease)
//	notice/<task>          a count, rewritten to wake the task's watchers (TTL lock.PauseTTL)
//	controls/epoch         the epoch, a count (TTL lock.PauseTTL)
//
// Every write is a compare-and-set on the name's version, tried again
// while other writers win it; a trigger and its idempotency key are one
// name, so one write records both.
const (
	triggersDir  = "triggers"
	pausedDir    = "paused"
	configDir    = "paused-config"
	runningDir   = "running"
	replacedDir  = "replaced"
	noticeDir    = "notice"
	controlsDir  = "controls"
	epochName    = "epoch"
	controlTries = 50 // CAS rounds of one control write: many replicas may renew one pause state at once
	configureFan = 64 // tasks Configure writes at once
)

// Controls is lock.Controls over a Store, but for ArmTrigger, which
// touches the slot's attempt counter: the store's own (Arm).
type Controls struct {
	kv  Store
	now func(context.Context) (time.Time, error)
	arm func(context.Context, lock.Slot, time.Duration) error
}

// NewControls returns the controls on s: now reads the store's clock
// (Trigger records a request at it), arm is lock.Controls.ArmTrigger.
func NewControls(s Store, now func(context.Context) (time.Time, error), arm func(context.Context, lock.Slot, time.Duration) error) *Controls {
	return &Controls{kv: s, now: now, arm: arm}
}

// update applies f to dir/name's entry and writes what it returns, with
// ttl, under a compare-and-set, again while the entry changes under it;
// f answers write false to leave the entry as it is. It returns the entry
// as it was before the write that landed (or as f saw it last).
func (c *Controls) update(ctx context.Context, dir, name string, ttl time.Duration,
	f func(e Entry) (value string, write bool, err error)) (Entry, error) {
	return c.updateFrom(ctx, dir, name, ttl, nil, f)
}

// updateFrom is update whose first round starts from known, the entry
// as a List just read it, instead of a Get.
func (c *Controls) updateFrom(ctx context.Context, dir, name string, ttl time.Duration, known *Entry,
	f func(e Entry) (value string, write bool, err error)) (Entry, error) {
	for range controlTries {
		var e Entry
		var err error
		if known != nil {
			e, known = *known, nil
		} else if e, err = c.kv.Get(ctx, dir, name); err != nil {
			return Entry{}, err
		}
		v, write, err := f(e)
		if err != nil || !write {
			return e, err
		}
		ok, err := c.kv.Put(ctx, dir, name, v, e.Version, ttl)
		if err != nil || ok {
			return e, err
		}
	}
	return Entry{}, errContended
}

// notify wakes task's watchers (a rewrite of its notice) and changes the
// epoch. A failure leaves the change made: replicas read every task's
// controls at least once per lock.ControlsSweep.
func (c *Controls) notify(ctx context.Context, tasks ...string) {
	incr := func(e Entry) (string, bool, error) {
		n, _ := strconv.ParseInt(e.Value, 10, 64)
		return strconv.FormatInt(n+1, 10), true, nil
	}
	for _, task := range tasks {
		_, _ = c.update(ctx, noticeDir, task, lock.PauseTTL, incr)
	}
	if len(tasks) > 0 {
		_, _ = c.update(ctx, controlsDir, epochName, lock.PauseTTL, incr)
	}
}

// triggerValue is a decoded triggers/<task> entry.
type triggerValue struct {
	pending [][2]int64 // {unix s, unix ms}, oldest first
	keys    []idemKey  // oldest first
}

type idemKey struct {
	sec int64
	key string
}

func decodeTriggers(task, v string) (triggerValue, error) {
	var out triggerValue
	if v == "" {
		return out, nil
	}
	foreign := func() (triggerValue, error) {
		return triggerValue{}, fmt.Errorf("lock: triggers of %s (%s/%s): %w: %q", task, triggersDir, task, lock.ErrForeign, v)
	}
	lines := strings.Split(v, "\n")
	for _, f := range strings.Fields(lines[0]) {
		s, ms, ok := strings.Cut(f, "@")
		a, err1 := strconv.ParseInt(s, 10, 64)
		b, err2 := strconv.ParseInt(ms, 10, 64)
		if !ok || err1 != nil || err2 != nil {
			return foreign()
		}
		out.pending = append(out.pending, [2]int64{a, b})
	}
	for _, line := range lines[1:] {
		s, q, ok := strings.Cut(line, " ")
		sec, err := strconv.ParseInt(s, 10, 64)
		k, qerr := strconv.Unquote(q)
		if !ok || err != nil || qerr != nil {
			return foreign()
		}
		out.keys = append(out.keys, idemKey{sec, k})
	}
	return out, nil
}

func (t triggerValue) encode() string {
	var b strings.Builder
	for i, p := range t.pending {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.FormatInt(p[0], 10) + "@" + strconv.FormatInt(p[1], 10))
	}
	for _, k := range t.keys {
		b.WriteString("\n" + strconv.FormatInt(k.sec, 10) + " " + strconv.Quote(k.key))
	}
	return b.String()
}

// Trigger implements lock.Controls: one compare-and-set of the task's
// triggers entry records the trigger and its key together.
func (c *Controls) Trigger(ctx context.Context, task, key string, window time.Duration) (lock.Trigger, error) {
	now, err := c.now(ctx)
	if err != nil {
		return lock.Trigger{}, fmt.Errorf("lock: trigger %s: %w", task, err)
	}
	sec := now.Unix()
	var out lock.Trigger
	_, err = c.update(ctx, triggersDir, task, lock.TriggerTTL, func(e Entry) (string, bool, error) {
		t, err := decodeTriggers(task, e.Value)
		if err != nil {
			return "", false, err
		}
		oldest := now.Add(-lock.TriggerTTL).Unix()
		t.keys = slices.DeleteFunc(t.keys, func(k idemKey) bool { return k.sec < oldest })
		if key != "" {
			if i := slices.IndexFunc(t.keys, func(k idemKey) bool { return k.key == key }); i >= 0 {
				out = lock.Trigger{Result: lock.Repeated, Time: time.Unix(t.keys[i].sec, 0).UTC()}
				return "", false, nil
			}
		}
		cut := now.Add(-window).UnixMilli()
		t.pending = slices.DeleteFunc(t.pending, func(p [2]int64) bool { return p[1] <= cut })
		out = lock.Trigger{Result: lock.Coalesced, Time: time.Unix(sec, 0).UTC()}
		if !slices.ContainsFunc(t.pending, func(p [2]int64) bool { return p[0] == sec }) {
			t.pending = append(t.pending, [2]int64{sec, now.UnixMilli()})
			out.Result = lock.Started
		}
		if key != "" {
			t.keys = append(t.keys[max(0, len(t.keys)-lock.MaxTriggerKeys+1):], idemKey{sec, key})
		}
		return t.encode(), true, nil
	})
	if err != nil {
		return lock.Trigger{}, fmt.Errorf("lock: trigger %s: %w", task, err)
	}
	if out.Result == lock.Started {
		c.notify(ctx, task)
	}
	return out, nil
}

// fewEntries bounds the tasks whose entries of a directory are read one
// Get each (entries); for more, the directory is listed.
const fewEntries = 8

// entries reads the live entries of names in dir, by name: one Get each
// when they are few (the read a notice brings names one task or a few),
// so that it does not read the entry of every configured task, as a List
// of the directory does; else one List.
func (c *Controls) entries(ctx context.Context, dir string, names []string) (map[string]Entry, error) {
	if len(names) > fewEntries {
		return c.kv.List(ctx, dir)
	}
	out := make(map[string]Entry, len(names))
	for _, name := range names {
		e, err := c.kv.Get(ctx, dir, name)
		if err != nil {
			return nil, err
		}
		if e.Version != 0 {
			out[name] = e
		}
	}
	return out, nil
}

// Triggers implements lock.Controls: the tasks' entries of the triggers
// directory (entries).
func (c *Controls) Triggers(ctx context.Context, tasks []string) ([][]time.Time, error) {
	all, err := c.entries(ctx, triggersDir, tasks)
	if err != nil {
		return nil, fmt.Errorf("lock: triggers of %d tasks: %w", len(tasks), err)
	}
	out := make([][]time.Time, len(tasks))
	for i, task := range tasks {
		e, ok := all[task]
		if !ok {
			continue
		}
		t, err := decodeTriggers(task, e.Value)
		if err != nil {
			return nil, err
		}
		for _, p := range t.pending {
			out[i] = append(out[i], time.Unix(p[0], 0).UTC())
		}
	}
	return out, nil
}

// ArmTrigger implements lock.Controls: the store's own.
func (c *Controls) ArmTrigger(ctx context.Context, slot lock.Slot, doneTTL time.Duration) error {
	return c.arm(ctx, slot, doneTTL)
}

// SetPaused implements lock.Controls.
func (c *Controls) SetPaused(ctx context.Context, task string, op lock.PauseOp) (bool, error) {
	arg, err := schema.PauseArg(op)
	if err != nil {
		return false, err
	}
	var want string
	was, err := c.update(ctx, pausedDir, task, lock.PauseTTL, func(e Entry) (string, bool, error) {
		want = "paused"
		switch {
		case op == lock.Resume:
			want = "resumed"
		case op == lock.Seed && e.Version != 0:
			want = e.Value
		}
		return want, true, nil
	})
	if err != nil {
		return false, fmt.Errorf("lock: %s %s (%s/%s): %w", arg, task, pausedDir, task, err)
	}
	if was.Version == 0 || was.Value != want {
		c.notify(ctx, task)
	}
	return want == "paused", nil
}

// Configure implements lock.Controls: the tasks' two entries are read in
// one List each, and only a task whose entries change is written (a few
// tasks at once), from what the List read: a first start costs one write
// per task.
func (c *Controls) Configure(ctx context.Context, tasks []string, paused []bool) ([]bool, error) {
	if len(paused) != len(tasks) {
		return nil, fmt.Errorf("lock: configure %d tasks with %d values", len(tasks), len(paused))
	}
	states, err := c.kv.List(ctx, pausedDir)
	if err != nil {
		return nil, fmt.Errorf("lock: configure pause of %d tasks: %w", len(tasks), err)
	}
	applied, err := c.kv.List(ctx, configDir)
	if err != nil {
		return nil, fmt.Errorf("lock: configure pause of %d tasks: %w", len(tasks), err)
	}
	out := make([]bool, len(tasks))
	errs := make([]error, len(tasks))
	changed := make([]bool, len(tasks))
	var wg sync.WaitGroup
	sem := make(chan struct{}, configureFan)
	for i, task := range tasks {
		file := schema.PauseValue(paused[i])
		st, a := states[task], applied[task]
		if a.Version != 0 && a.Value == file && st.Version != 0 {
			// Nothing to apply: the recorded state stands.
			p, err := pauseState(task, st.Value)
			out[i], errs[i] = p, err
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			out[i], changed[i], errs[i] = c.configure(ctx, task, file, a, st)
		}()
	}
	wg.Wait()
	var moved []string
	for i, ch := range changed {
		if ch {
			moved = append(moved, tasks[i])
		}
	}
	c.notify(ctx, moved...)
	return out, errors.Join(errs...)
}

// configure applies the config's value file to task (pause.lua's
// "config"), from its entries as Configure listed them; changed reports
// whether the state changed.
func (c *Controls) configure(ctx context.Context, task, file string, applied, state Entry) (paused, changed bool, err error) {
	var prev Entry
	_, err = c.updateFrom(ctx, configDir, task, lock.PauseTTL, &applied, func(e Entry) (string, bool, error) {
		prev = e
		return file, e.Version == 0 || e.Value != file, nil
	})
	if err != nil {
		return false, false, fmt.Errorf("lock: configure pause of %s (%s/%s): %w", task, configDir, task, err)
	}
	var want string
	was, err := c.updateFrom(ctx, pausedDir, task, lock.PauseTTL, &state, func(e Entry) (string, bool, error) {
		switch {
		case prev.Version != 0 && prev.Value != file:
			want = file
		case e.Version != 0:
			want = e.Value
			return want, false, nil
		case file != "paused":
			want = ""
			return "", false, nil // nothing recorded, nothing to pause
		default:
			want = file
		}
		return want, true, nil
	})
	if err != nil {
		return false, false, fmt.Errorf("lock: configure pause of %s (%s/%s): %w", task, pausedDir, task, err)
	}
	if want == "" {
		return false, false, nil
	}
	p, err := pauseState(task, want)
	return p, err == nil && (was.Version == 0 || was.Value != want), err
}

func pauseState(task, v string) (bool, error) {
	switch v {
	case "paused":
		return true, nil
	case "resumed":
		return false, nil
	}
	return false, fmt.Errorf("lock: pause state of %s (%s/%s): %w: %q", task, pausedDir, task, lock.ErrForeign, v)
}

// Paused implements lock.Controls: the tasks' entries of the states (and
// with renew of the applied config values, and a rewrite of each entry of
// tasks), as entries reads them.
func (c *Controls) Paused(ctx context.Context, tasks []string, renew bool) ([]bool, error) {
	states, err := c.entries(ctx, pausedDir, tasks)
	if err != nil {
		return nil, fmt.Errorf("lock: pause state of %d tasks: %w", len(tasks), err)
	}
	var applied map[string]Entry
	if renew {
		if applied, err = c.entries(ctx, configDir, tasks); err != nil {
			return nil, fmt.Errorf("lock: pause state of %d tasks: %w", len(tasks), err)
		}
	}
	out := make([]bool, len(tasks))
	for i, task := range tasks {
		e, ok := states[task]
		if !ok {
			continue
		}
		if out[i], err = pauseState(task, e.Value); err != nil {
			return nil, err
		}
		if !renew {
			continue
		}
		// A lost compare-and-set is another writer's write, which renewed
		// the entry too.
		if _, err := c.kv.Put(ctx, pausedDir, task, e.Value, e.Version, lock.PauseTTL); err != nil {
			return nil, fmt.Errorf("lock: renew pause state of %s: %w", task, err)
		}
		if a, ok := applied[task]; ok {
			if _, err := c.kv.Put(ctx, configDir, task, a.Value, a.Version, lock.PauseTTL); err != nil {
				return nil, fmt.Errorf("lock: renew pause state of %s: %w", task, err)
			}
		}
	}
	return out, nil
}

// Occupy implements lock.Controls (occupy.lua).
func (c *Controls) Occupy(ctx context.Context, slot lock.Slot, owner lock.Owner, lease time.Duration, replace bool) (lock.Occupancy, error) {
	me := schema.Occupant(slot, owner)
	var out lock.Occupancy
	_, err := c.update(ctx, runningDir, slot.Task, lease, func(e Entry) (string, bool, error) {
		out = lock.Occupancy{Taken: true}
		if e.Version != 0 && e.Value != me && schema.OccupantSlot(e.Value) != slot.ID {
			out = lock.Occupancy{Other: schema.OccupantSlot(e.Value), Value: e.Value}
			if !replace {
				out.TTL = e.TTL
				return "", false, nil
			}
			out.Taken = true
			// The record replaced, kept for a lease before this one is
			// written: a later Occupy of this slot (this call's again
			// after a lost reply, a retry) answers it too.
			if _, err := c.update(ctx, replacedDir, slot.Task, lease, func(Entry) (string, bool, error) {
				return e.Value, true, nil
			}); err != nil {
				return "", false, err
			}
		}
		return me, true, nil
	})
	if err != nil {
		return lock.Occupancy{}, fmt.Errorf("lock: occupy %s attempt %d (%s/%s): %w", slot, owner.Attempt, runningDir, slot.Task, err)
	}
	if out.Taken && out.Other != "" {
		c.notify(ctx, slot.Task)
		return out, nil
	}
	if replace && out.Taken {
		r, err := c.kv.Get(ctx, replacedDir, slot.Task)
		if err != nil {
			return lock.Occupancy{}, fmt.Errorf("lock: occupy %s attempt %d (%s/%s): %w", slot, owner.Attempt, replacedDir, slot.Task, err)
		}
		if r.Version != 0 && schema.OccupantSlot(r.Value) != slot.ID {
			out.Other, out.Value = schema.OccupantSlot(r.Value), r.Value
		}
	}
	return out, nil
}

// RenewOccupancy implements lock.Controls.
func (c *Controls) RenewOccupancy(ctx context.Context, slot lock.Slot, owner lock.Owner, lease time.Duration) error {
	me := schema.Occupant(slot, owner)
	_, err := c.update(ctx, runningDir, slot.Task, lease, func(e Entry) (string, bool, error) {
		if e.Version == 0 || e.Value != me {
			return "", false, lock.ErrNotHeld
		}
		return me, true, nil
	})
	if err != nil {
		return fmt.Errorf("lock: renew running record of %s attempt %d (%s/%s): %w", slot, owner.Attempt, runningDir, slot.Task, err)
	}
	return nil
}

// Vacate implements lock.Controls.
func (c *Controls) Vacate(ctx context.Context, slot lock.Slot, owner lock.Owner) error {
	me := schema.Occupant(slot, owner)
	e, err := c.kv.Get(ctx, runningDir, slot.Task)
	if err == nil && e.Version != 0 && e.Value == me {
		// A lost compare-and-set: replaced or expired in between, nothing
		// of ours to remove.
		_, err = c.kv.Delete(ctx, runningDir, slot.Task, e.Version)
	}
	if err != nil {
		return fmt.Errorf("lock: vacate running record of %s attempt %d (%s/%s): %w", slot, owner.Attempt, runningDir, slot.Task, err)
	}
	return nil
}

// WatchTask implements lock.Controls: a notice of each rewrite of the
// task's notice entry.
func (c *Controls) WatchTask(task string) *lock.Watch {
	var stop func()
	w := lock.NewWatch(func() { stop() })
	stop = c.kv.OnChange(noticeDir, task, func() { w.Notify(lock.Released) })
	return w
}

// Epoch implements lock.Controls.
func (c *Controls) Epoch(ctx context.Context) (int64, error) {
	e, err := c.kv.Get(ctx, controlsDir, epochName)
	if err != nil {
		return 0, fmt.Errorf("lock: controls epoch: %w", err)
	}
	if e.Version == 0 {
		return 0, nil
	}
	n, err := strconv.ParseInt(e.Value, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("lock: controls epoch (%s/%s): %w: %q", controlsDir, epochName, lock.ErrForeign, e.Value)
	}
	return n, nil
}
