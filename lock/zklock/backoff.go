package zklock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/slotd/slotd/lock"
)

// ReleaseAfter implements lock.Store: Release's multi-op, which also
// writes the backoff's end into the slot node — the upper bound of the
// leader's clock plus delay; a claim compares it with the lower bound, so
// no attempt starts before delay has passed by the leader's clock. The
// run node's deletion wakes the watchers as a release does.
func (s *Store) ReleaseAfter(ctx context.Context, slot lock.Slot, owner lock.Owner, delay time.Duration) error {
	if delay <= 0 {
		return s.Release(ctx, slot, owner)
	}
	if h, ok := s.take(slot, owner); ok {
		if _, hi, err := s.now(ctx); err == nil {
			notBefore := time.UnixMilli(hi.Add(delay).UnixMilli()).UTC()
			if done, err := s.releaseHeld(ctx, slot, h, notBefore); done {
				return s.released(ctx, slot, owner, err)
			}
		}
	}
	for range maxRaces {
		sn, run, err := s.held(ctx, "release", slot, owner)
		if err != nil {
			if !errors.Is(err, lock.ErrNotHeld) {
				s.orphans.Store(s.RunPath(slot), lock.Value{Owner: owner}.String())
			}
			return err
		}
		d, err := decodeSlot(sn.data)
		if err != nil {
			return fmt.Errorf("zklock: release %s attempt %d: %w", slot, owner.Attempt, err)
		}
		_, hi, err := s.now(ctx)
		if err != nil {
			s.orphans.Store(s.RunPath(slot), lock.Value{Owner: owner}.String())
			return fmt.Errorf("zklock: release %s attempt %d: %w", slot, owner.Attempt, err)
		}
		d.notBefore = time.UnixMilli(hi.Add(delay).UnixMilli()).UTC()
		_, err = s.multi(ctx,
			&zk.SetDataRequest{Path: s.SlotPath(slot), Data: d.encode(), Version: sn.stat.Version},
			&zk.DeleteRequest{Path: s.RunPath(slot), Version: run.stat.Version})
		switch {
		case err == nil:
			s.watch.afterRelease(slot)
			s.announce(ctx, slot)
			return nil
		case errors.Is(err, zk.ErrSessionExpired):
			return fmt.Errorf("zklock: release %s attempt %d: %w (%w)", slot, owner.Attempt, lock.ErrNotHeld, err)
		case !lost(err):
			s.orphans.Store(s.RunPath(slot), lock.Value{Owner: owner}.String())
			return fmt.Errorf("zklock: release %s attempt %d: %w", slot, owner.Attempt, err)
		}
	}
	return fmt.Errorf("zklock: release %s attempt %d: lost %d races in a row", slot, owner.Attempt, maxRaces)
}
