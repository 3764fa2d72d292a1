package etcdlock

import (
	"context"
	"fmt"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/internal/kv"
)

// The operator controls (lock.Controls) on etcd: package kv's, over the
// primitive of fleet.go, at the store's clock (Time). Keys (prefix
// "slotd"):
//
//	slotd:kv:triggers/<task>       pending triggers and idempotency keys
//	slotd:kv:paused/<task>         "paused" or "resumed"
//	slotd:kv:paused-config/<task>  the config's paused value last applied
//	slotd:kv:running/<task>        the attempt that runs the task (forbid, replace)
//	slotd:kv:notice/<task>         rewritten to wake the task's watchers
//	slotd:kv:controls/epoch        the epoch
//
// Arming a trigger's slot is the slot keys' own: one Txn.

var _ lock.Controls = (*Store)(nil)

func (s *Store) controls() *kv.Controls { return s.kvControls }

// arm implements lock.Controls.ArmTrigger: if none of the slot's keys
// exists, its attempts and base keys are written at lock.TriggerBase, on
// a lease of the done TTL, as a claim writes them.
func (s *Store) arm(ctx context.Context, slot lock.Slot, doneTTL time.Duration) error {
	state, attempts, base := s.keys(slot)
	err := s.withBucket(ctx, doneTTL, func(id clientv3.LeaseID) error {
		octx, cancel := opContext(ctx)
		defer cancel()
		n := strconv.Itoa(lock.TriggerBase)
		_, err := s.cli.Txn(octx).If(
			clientv3.Compare(clientv3.Version(state), "=", 0),
			clientv3.Compare(clientv3.Version(attempts), "=", 0),
			clientv3.Compare(clientv3.Version(base), "=", 0),
		).Then(
			clientv3.OpPut(attempts, n, clientv3.WithLease(id)),
			clientv3.OpPut(base, n, clientv3.WithLease(id)),
		).Commit()
		return err
	})
	if err != nil {
		return etcdErr(fmt.Errorf("etcdlock: arm trigger %s (key %s): %w", slot, attempts, err))
	}
	return nil
}

// Trigger implements lock.Controls.
func (s *Store) Trigger(ctx context.Context, task, key string, window time.Duration) (lock.Trigger, error) {
	return s.controls().Trigger(ctx, task, key, window)
}

// Triggers implements lock.Controls: one range read.
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

// WatchTask implements lock.Controls: a watch of the task's notice key.
func (s *Store) WatchTask(task string) *lock.Watch { return s.controls().WatchTask(task) }

// Epoch implements lock.Controls.
func (s *Store) Epoch(ctx context.Context) (int64, error) { return s.controls().Epoch(ctx) }
