package redislock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/internal/kv"
)

// The operator controls (lock.Controls) on a Redlock quorum: package kv's,
// over the quorum key-value store of redlock_kv.go, at the median of the
// masters' clocks (Time). Keys on every master (prefix "slotd"):
//
//	slotd:kv:triggers/<task>       pending triggers and idempotency keys
//	slotd:kv:paused/<task>         "paused" or "resumed"
//	slotd:kv:paused-config/<task>  the config's paused value last applied
//	slotd:kv:running/<task>        the attempt that runs the task (forbid, replace)
//	slotd:kv:notice/<task>         rewritten to wake the task's watchers
//	slotd:kv:controls/epoch        the epoch
//	slotd:kv:<dir>                 each directory's index of names
//
// Arming a trigger's slot is the slot keys' own: arm.lua on a quorum.

var _ lock.Controls = (*Redlock)(nil)

// controls is built on first use: NewRedlock does no I/O and has no
// error to report from it, and a store that never serves a control
// pays nothing.
func (r *Redlock) controls() *kv.Controls {
	r.ctlOnce.Do(func() { r.ctl = kv.NewControls(redlockKV{r}, r.Time, r.arm) })
	return r.ctl
}

// redlockControls is the state the controls add to a Redlock.
type redlockControls struct {
	ctlOnce sync.Once
	ctl     *kv.Controls
}

// arm implements lock.Controls.ArmTrigger: arm.lua on every master, done
// when a quorum ran it (armed now, or found the slot armed or claimed). A
// master that missed it counts the claim from 0, and the claim renumbers
// it to the quorum's attempt (see Claim), so the fencing token still
// starts past lock.TriggerBase.
func (r *Redlock) arm(ctx context.Context, slot lock.Slot, doneTTL time.Duration) error {
	res := all(ctx, r, 0, func(ctx context.Context, n *Store) (struct{}, error) {
		return struct{}{}, n.ArmTrigger(ctx, slot, doneTTL)
	})
	ok := 0
	var errs []error
	for i, nr := range res {
		if nr.Err == nil {
			ok++
		} else {
			errs = append(errs, fmt.Errorf("node %d: %w", i, nr.Err))
		}
	}
	if ok < r.quorum() {
		return fmt.Errorf("lock: arm trigger %s: armed on %d of %d nodes, %d needed: %w: %w",
			slot, ok, len(r.nodes), r.quorum(), ErrNoQuorum, errors.Join(errs...))
	}
	return nil
}

// Trigger implements lock.Controls.
func (r *Redlock) Trigger(ctx context.Context, task, key string, window time.Duration) (lock.Trigger, error) {
	return r.controls().Trigger(ctx, task, key, window)
}

// Triggers implements lock.Controls: one read of the triggers directory.
func (r *Redlock) Triggers(ctx context.Context, tasks []string) ([][]time.Time, error) {
	return r.controls().Triggers(ctx, tasks)
}

// ArmTrigger implements lock.Controls.
func (r *Redlock) ArmTrigger(ctx context.Context, slot lock.Slot, doneTTL time.Duration) error {
	return r.arm(ctx, slot, doneTTL)
}

// SetPaused implements lock.Controls.
func (r *Redlock) SetPaused(ctx context.Context, task string, op lock.PauseOp) (bool, error) {
	return r.controls().SetPaused(ctx, task, op)
}

// Configure implements lock.Controls.
func (r *Redlock) Configure(ctx context.Context, tasks []string, paused []bool) ([]bool, error) {
	return r.controls().Configure(ctx, tasks, paused)
}

// Paused implements lock.Controls.
func (r *Redlock) Paused(ctx context.Context, tasks []string, renew bool) ([]bool, error) {
	return r.controls().Paused(ctx, tasks, renew)
}

// Occupy implements lock.Controls.
func (r *Redlock) Occupy(ctx context.Context, slot lock.Slot, owner lock.Owner, lease time.Duration, replace bool) (lock.Occupancy, error) {
	return r.controls().Occupy(ctx, slot, owner, lease, replace)
}

// RenewOccupancy implements lock.Controls.
func (r *Redlock) RenewOccupancy(ctx context.Context, slot lock.Slot, owner lock.Owner, lease time.Duration) error {
	return r.controls().RenewOccupancy(ctx, slot, owner, lease)
}

// Vacate implements lock.Controls.
func (r *Redlock) Vacate(ctx context.Context, slot lock.Slot, owner lock.Owner) error {
	return r.controls().Vacate(ctx, slot, owner)
}

// WatchTask implements lock.Controls: the task's notice key on every
// master.
func (r *Redlock) WatchTask(task string) *lock.Watch { return r.controls().WatchTask(task) }

// Epoch implements lock.Controls.
func (r *Redlock) Epoch(ctx context.Context) (int64, error) { return r.controls().Epoch(ctx) }
