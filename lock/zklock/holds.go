package zklock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/slotd/slotd/lock"
)

// hold is what a claim this store won wrote: the slot node's data and
// version after it, the run node's data and version. Renew, Complete and
// Release write from it at once, without reading both nodes first: their
// multi-ops check the same versions a read would have found, so they land
// only if nothing has changed since — and every write that could put
// another holder's run node in place (a claim, a takeover, a rerun)
// moves the slot node's version. A write that loses that check (or finds
// the run node gone with its session) reads and decides as before.
type hold struct {
	slot        slotData
	slotVersion int32
	run         []byte
	runVersion  int32
}

// heldBy is the hold of slot, if owner's claim made it. Renew leaves it
// in place (and swaps in the renewed one, unless Complete or Release took
// it meanwhile); Complete and Release take it (take).
func (s *Store) heldBy(slot lock.Slot, owner lock.Owner) (*hold, bool) {
	path := s.RunPath(slot)
	v, ok := s.holds.Load(path)
	if !ok {
		return nil, false
	}
	h := v.(*hold)
	if decodeRun(h.run).value != (lock.Value{Owner: owner}).String() {
		s.holds.CompareAndDelete(path, h) // an earlier claim's, left by a failure
		return nil, false
	}
	return h, true
}

// take removes and returns the hold of slot, if owner's claim made it.
func (s *Store) take(slot lock.Slot, owner lock.Owner) (*hold, bool) {
	h, ok := s.heldBy(slot, owner)
	if ok && !s.holds.CompareAndDelete(s.RunPath(slot), h) {
		return nil, false
	}
	return h, ok
}

// renewHeld is Renew's multi-op from h: done reports whether it landed
// (err is then its error, if not a lost race).
func (s *Store) renewHeld(ctx context.Context, slot lock.Slot, h *hold) (done bool, err error) {
	path := s.RunPath(slot)
	res, err := s.multi(ctx,
		&zk.CheckVersionRequest{Path: s.SlotPath(slot), Version: h.slotVersion},
		&zk.SetDataRequest{Path: path, Data: h.run, Version: h.runVersion})
	if err != nil {
		s.holds.CompareAndDelete(path, h)
		return !lost(err), err
	}
	next := *h
	next.runVersion = res[1].Stat.Version
	s.holds.CompareAndSwap(path, h, &next)
	return true, nil
}

// completeHeld is Complete's multi-op from h.
func (s *Store) completeHeld(ctx context.Context, slot lock.Slot, owner lock.Owner, h *hold) (done bool, err error) {
	lo, _, err := s.now(ctx)
	if err != nil {
		return true, fmt.Errorf("zklock: complete %s attempt %d: %w", slot, owner.Attempt, err)
	}
	d := h.slot
	d.done = lock.Value{Owner: owner, Done: true, Finished: time.UnixMilli(lo.UnixMilli())}.String()
	res, err := s.multi(ctx,
		&zk.DeleteRequest{Path: s.RunPath(slot), Version: h.runVersion},
		&zk.SetDataRequest{Path: s.SlotPath(slot), Data: d.encode(), Version: h.slotVersion})
	if err == nil {
		s.watch.afterComplete(slot, res[1].Stat.Version)
	}
	return !lost(err), err
}

// releaseHeld is Release's (or, with notBefore, ReleaseAfter's) multi-op
// from h.
func (s *Store) releaseHeld(ctx context.Context, slot lock.Slot, h *hold, notBefore time.Time) (done bool, err error) {
	sw := any(&zk.CheckVersionRequest{Path: s.SlotPath(slot), Version: h.slotVersion})
	if !notBefore.IsZero() {
		d := h.slot
		d.notBefore = notBefore
		sw = &zk.SetDataRequest{Path: s.SlotPath(slot), Data: d.encode(), Version: h.slotVersion}
	}
	_, err = s.multi(ctx, sw, &zk.DeleteRequest{Path: s.RunPath(slot), Version: h.runVersion})
	return !lost(err), err
}

// heldErr words the error of a multi-op written from a hold as the
// reading path would.
func heldErr(op string, slot lock.Slot, owner lock.Owner, err error) error {
	if errors.Is(err, zk.ErrSessionExpired) {
		return fmt.Errorf("zklock: %s %s attempt %d: %w (%w)", op, slot, owner.Attempt, lock.ErrNotHeld, err)
	}
	return fmt.Errorf("zklock: %s %s attempt %d: %w", op, slot, owner.Attempt, err)
}
