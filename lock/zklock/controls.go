package zklock

import (
	"context"
	"fmt"
	"time"

	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/internal/kv"
)

// The operator controls (lock.Controls) on ZooKeeper: package kv's, over
// the primitive of fleet.go, at the leader's clock (Time). Nodes (root
// /slotd; a task's name escaped as a node name):
//
//	/slotd/.kv/triggers/<task>       pending triggers and idempotency keys
//	/slotd/.kv/paused/<task>         "paused" or "resumed"
//	/slotd/.kv/paused-config/<task>  the config's paused value last applied
//	/slotd/.kv/running/<task>        the attempt that runs the task (forbid, replace)
//	/slotd/.kv/notice/<task>         rewritten to wake the task's watchers (an exists watch)
//	/slotd/.kv/controls/epoch        the epoch
//
// Arming a trigger's slot is the slot node's own: one create.

var _ lock.Controls = (*Store)(nil)

func (s *Store) controls() *kv.Controls { return s.kvControls }

// arm implements lock.Controls.ArmTrigger: if the slot's node does not
// exist, it is created with its attempt count and base at
// lock.TriggerBase, with the done TTL, as a first claim creates it.
func (s *Store) arm(ctx context.Context, slot lock.Slot, doneTTL time.Duration) error {
	d := slotData{attempts: lock.TriggerBase, base: lock.TriggerBase, ttl: doneTTL}
	if _, err := s.createTTL(ctx, slot.Task, s.SlotPath(slot), d.encode(), doneTTL); err != nil {
		return fmt.Errorf("zklock: arm trigger %s: %w", slot, err)
	}
	return nil
}

// Trigger implements lock.Controls.
func (s *Store) Trigger(ctx context.Context, task, key string, window time.Duration) (lock.Trigger, error) {
	return s.controls().Trigger(ctx, task, key, window)
}

// Triggers implements lock.Controls: the triggers node's children, then
// each one's data.
func (s *Store) Triggers(ctx context.Context, tasks []string) ([][]time.Time, error) {
	return s.controls().Triggers(ctx, tasks)
}

// ArmTrigger implements lock.Controls.
func (s *Store) ArmTrigger(ctx context.Context, slot lock.Slot, doneTTL time.Duration) error {
	return s.arm(ctx, slot, doneTTL)
}

// SetPaused implements lock.Controls.
func (s *Store) SetPaused(ctx context.Context, task string, op lock.PauseOp) (bool, error) {
	return s.controls().SetPaused(ctx, task, op)
}

// Configure implements lock.Controls.
func (s *Store) Configure(ctx context.Context, tasks []string, paused []bool) ([]bool, error) {
	return s.controls().Configure(ctx, tasks, paused)
}

// Paused implements lock.Controls.
func (s *Store) Paused(ctx context.Context, tasks []string, renew bool) ([]bool, error) {
	return s.controls().Paused(ctx, tasks, renew)
}

// Occupy implements lock.Controls.
func (s *Store) Occupy(ctx context.Context, slot lock.Slot, owner lock.Owner, lease time.Duration, replace bool) (lock.Occupancy, error) {
	return s.controls().Occupy(ctx, slot, owner, lease, replace)
}

// RenewOccupancy implements lock.Controls.
func (s *Store) RenewOccupancy(ctx context.Context, slot lock.Slot, owner lock.Owner, lease time.Duration) error {
	return s.controls().RenewOccupancy(ctx, slot, owner, lease)
}

// Vacate implements lock.Controls.
func (s *Store) Vacate(ctx context.Context, slot lock.Slot, owner lock.Owner) error {
	return s.controls().Vacate(ctx, slot, owner)
}

// WatchTask implements lock.Controls: an exists watch of the task's
// notice node.
func (s *Store) WatchTask(task string) *lock.Watch { return s.controls().WatchTask(task) }

// Epoch implements lock.Controls.
func (s *Store) Epoch(ctx context.Context) (int64, error) { return s.controls().Epoch(ctx) }
