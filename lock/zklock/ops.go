package zklock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/slotd/slotd/lock"
)

// held reads slot and checks that owner holds it: the run node holds
// owner's value and belongs to this store's session.
func (s *Store) held(ctx context.Context, op string, slot lock.Slot, owner lock.Owner) (sn, run node, err error) {
	sn, run, err = s.read(ctx, slot)
	if err != nil {
		return sn, run, fmt.Errorf("zklock: %s %s attempt %d: %w", op, slot, owner.Attempt, err)
	}
	if !run.exists || decodeRun(run.data).value != (lock.Value{Owner: owner}).String() || run.stat.EphemeralOwner != s.conn.SessionID() || !sn.exists {
		return sn, run, fmt.Errorf("zklock: %s %s attempt %d: %w", op, slot, owner.Attempt, lock.ErrNotHeld)
	}
	return sn, run, nil
}

// multi runs ops as one transaction.
func (s *Store) multi(ctx context.Context, ops ...any) ([]zk.MultiResponse, error) {
	return call(ctx, func() ([]zk.MultiResponse, error) { return s.conn.Multi(ops...) })
}

// Renew implements lock.Store: a version-checked write of the run node,
// through the leader, which succeeds only while the session that holds the
// claim lives. lease is not stored: the session bounds the hold (see the
// package doc).
func (s *Store) Renew(ctx context.Context, slot lock.Slot, owner lock.Owner, lease time.Duration) error {
	if h, ok := s.heldBy(slot, owner); ok {
		if done, err := s.renewHeld(ctx, slot, h); done {
			if err != nil {
				return heldErr("renew", slot, owner, err)
			}
			return nil
		}
	}
	for range maxRaces {
		sn, run, err := s.held(ctx, "renew", slot, owner)
		if err != nil {
			return err
		}
		_, err = s.multi(ctx,
			&zk.CheckVersionRequest{Path: s.SlotPath(slot), Version: sn.stat.Version},
			&zk.SetDataRequest{Path: s.RunPath(slot), Data: run.data, Version: run.stat.Version})
		switch {
		case err == nil:
			return nil
		case errors.Is(err, zk.ErrSessionExpired):
			return fmt.Errorf("zklock: renew %s attempt %d: %w (%w)", slot, owner.Attempt, lock.ErrNotHeld, err)
		case !lost(err):
			return fmt.Errorf("zklock: renew %s attempt %d: %w", slot, owner.Attempt, err)
		}
	}
	return fmt.Errorf("zklock: renew %s attempt %d: lost %d races in a row", slot, owner.Attempt, maxRaces)
}

// Complete implements lock.Store: one multi-op deletes the run node and
// writes the done marker into the slot node, whose TTL (the DoneTTL of the
// slot's first claim) then counts from now; doneTTL is not used.
func (s *Store) Complete(ctx context.Context, slot lock.Slot, owner lock.Owner, doneTTL time.Duration) error {
	if h, ok := s.take(slot, owner); ok {
		if done, err := s.completeHeld(ctx, slot, owner, h); done {
			if err != nil {
				return heldErr("complete", slot, owner, err)
			}
			return nil
		}
	}
	for range maxRaces {
		sn, run, err := s.held(ctx, "complete", slot, owner)
		if errors.Is(err, lock.ErrNotHeld) && !run.exists && sn.exists {
			if d, derr := decodeSlot(sn.data); derr == nil && strings.HasPrefix(d.done, strings.TrimSuffix(lock.Value{Owner: owner, Done: true, Finished: time.UnixMilli(0)}.String(), "0")) {
				return nil // completed already: a retry after a lost reply
			}
		}
		if err != nil {
			return err
		}
		d, err := decodeSlot(sn.data)
		if err != nil {
			return fmt.Errorf("zklock: complete %s attempt %d: %w", slot, owner.Attempt, err)
		}
		lo, _, err := s.now(ctx)
		if err != nil {
			return fmt.Errorf("zklock: complete %s attempt %d: %w", slot, owner.Attempt, err)
		}
		d.done = lock.Value{Owner: owner, Done: true, Finished: time.UnixMilli(lo.UnixMilli())}.String()
		res, err := s.multi(ctx,
			&zk.DeleteRequest{Path: s.RunPath(slot), Version: run.stat.Version},
			&zk.SetDataRequest{Path: s.SlotPath(slot), Data: d.encode(), Version: sn.stat.Version})
		switch {
		case err == nil:
			s.watch.afterComplete(slot, res[1].Stat.Version)
			return nil
		case errors.Is(err, zk.ErrSessionExpired):
			return fmt.Errorf("zklock: complete %s attempt %d: %w (%w)", slot, owner.Attempt, lock.ErrNotHeld, err)
		case !lost(err):
			return fmt.Errorf("zklock: complete %s attempt %d: %w", slot, owner.Attempt, err)
		}
	}
	return fmt.Errorf("zklock: complete %s attempt %d: lost %d races in a row", slot, owner.Attempt, maxRaces)
}

// Release implements lock.Store: deletes the run node, under version
// checks of it and of the slot node; the deletion wakes the watchers, and
// a release notice (releases.go) the replicas that watch every release.
//
// A release that fails otherwise than by finding the slot not held (no
// connection, a timeout) may leave the run node in place, and with it the
// slot held for as long as the session lives, not only for a lease as on
// Redis: the store notes it, and the replica's next claim of the slot
// deletes it first (freeOrphan).
func (s *Store) Release(ctx context.Context, slot lock.Slot, owner lock.Owner) error {
	if h, ok := s.take(slot, owner); ok {
		if done, err := s.releaseHeld(ctx, slot, h, time.Time{}); done {
			return s.released(ctx, slot, owner, err)
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
		_, err = s.multi(ctx,
			&zk.CheckVersionRequest{Path: s.SlotPath(slot), Version: sn.stat.Version},
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

// released is the answer to a release (or release with a backoff)
// written from a hold, whose multi-op answered err: a failure that may
// have left the run node in place is noted, as Release notes it.
func (s *Store) released(ctx context.Context, slot lock.Slot, owner lock.Owner, err error) error {
	if err == nil {
		s.watch.afterRelease(slot)
		s.announce(ctx, slot)
		return nil
	}
	if !errors.Is(err, zk.ErrSessionExpired) {
		s.orphans.Store(s.RunPath(slot), lock.Value{Owner: owner}.String())
	}
	return heldErr("release", slot, owner, err)
}

// freeOrphan deletes the run node at path if it still holds value, the
// claim of a release that failed (see Release), on this session; the note
// goes once the node is known gone.
func (s *Store) freeOrphan(ctx context.Context, path, value string) error {
	run, err := s.get(ctx, path, false)
	if err != nil {
		return err
	}
	if run.exists && decodeRun(run.data).value == value && run.stat.EphemeralOwner == s.conn.SessionID() {
		_, err := call(ctx, func() (struct{}, error) { return struct{}{}, s.conn.Delete(path, run.stat.Version) })
		if err != nil && !lost(err) {
			return err
		}
	}
	s.orphans.CompareAndDelete(path, value)
	return nil
}

// Rerun implements lock.Store: clears the done marker (and, forced, the
// run node) and sets the base to the attempts made, in one multi-op.
func (s *Store) Rerun(ctx context.Context, slot lock.Slot, force bool) (lock.Rerun, error) {
	// A member answers reads from what it has applied, which may lag a
	// completion another session just made (CI: a rerun right after the
	// holder's completion was refused as running): an operator's rerun
	// first has the member catch up with the leader.
	if _, err := call(ctx, func() (string, error) { return s.conn.Sync(s.root) }); err != nil {
		return lock.Rerun{}, fmt.Errorf("zklock: rerun %s: sync: %w", slot, err)
	}
	for range maxRaces {
		sn, run, err := s.read(ctx, slot)
		if err != nil {
			return lock.Rerun{}, fmt.Errorf("zklock: rerun %s: %w", slot, err)
		}
		var out lock.Rerun
		d, derr := slotData{}, error(nil)
		if sn.exists {
			d, derr = decodeSlot(sn.data)
			out.Attempts = d.attempts
		}
		ttl := s.SessionTimeout()
		if run.exists {
			lo, _, err := s.now(ctx)
			if err != nil {
				return lock.Rerun{}, fmt.Errorf("zklock: rerun %s: %w", slot, err)
			}
			if left, ok := s.leaseLeft(run, lo); ok {
				// A run node whose lease ran out holds nothing (see
				// runData): it goes as a free slot's would have.
				ttl, run.expired = left, left <= 0
			}
		}
		if run.exists && !run.expired {
			out.Previous = decodeRun(run.data).value
			if !force {
				out.Refused, out.TTL = "foreign", ttl
				if strings.HasPrefix(out.Previous, "run:") {
					out.Refused = "running"
				}
				return out, nil
			}
		} else if d.done != "" {
			out.Previous = d.done
		} else if !d.notBefore.IsZero() {
			out.Previous = lock.Value{NotBefore: d.notBefore}.String()
		}
		var ops []any
		if run.exists {
			ops = append(ops, &zk.DeleteRequest{Path: s.RunPath(slot), Version: run.stat.Version})
		}
		if sn.exists {
			if derr != nil {
				// A foreign counter goes, as on the other stores.
				ops = append(ops, &zk.DeleteRequest{Path: s.SlotPath(slot), Version: sn.stat.Version})
				out.Attempts = 0
			} else {
				ops = append(ops, &zk.SetDataRequest{Path: s.SlotPath(slot), Data: slotData{attempts: d.attempts, base: d.attempts, ttl: d.ttl}.encode(), Version: sn.stat.Version})
			}
		}
		if len(ops) > 0 {
			_, err = s.multi(ctx, ops...)
			if lost(err) {
				continue
			}
			if err != nil {
				return lock.Rerun{}, fmt.Errorf("zklock: rerun %s: %w", slot, err)
			}
		}
		out.Cleared, out.Woken = true, int64(s.watch.count(s.SlotPath(slot)))
		s.announce(ctx, slot)
		return out, nil
	}
	return lock.Rerun{}, fmt.Errorf("zklock: rerun %s: lost %d races in a row", slot, maxRaces)
}

// statesInFlight bounds the reads States keeps in flight at once.
const statesInFlight = 64

// States implements lock.Store. A running slot's TTL is what is left of
// its holder's lease by the leader's clock (the session timeout for a
// run node that records no lease: how long it outlives a holder gone
// silent), and a run node whose lease ran out reads as free; a done
// slot's TTL is what is left of the slot node's TTL by the leader's clock.
func (s *Store) States(ctx context.Context, slots []lock.Slot) ([]lock.State, error) {
	out := make([]lock.State, len(slots))
	errs := make([]error, len(slots))
	var fatal error
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, statesInFlight)
	lo, _, err := s.now(ctx)
	if err != nil {
		return nil, fmt.Errorf("zklock: state of %d slots: %w", len(slots), err)
	}
	for i, slot := range slots {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			sn, run, err := s.read(ctx, slot)
			if err != nil {
				mu.Lock()
				fatal = err
				mu.Unlock()
				return
			}
			out[i], errs[i] = s.decodeState(slot, sn, run, lo)
		}()
	}
	wg.Wait()
	if fatal != nil {
		return nil, fmt.Errorf("zklock: state of %d slots: %w", len(slots), fatal)
	}
	return out, errors.Join(errs...)
}

func (s *Store) decodeState(slot lock.Slot, sn, run node, now time.Time) (lock.State, error) {
	st := lock.State{Status: "free"}
	var errs []error
	var d slotData
	if sn.exists {
		var err error
		if d, err = decodeSlot(sn.data); err != nil {
			errs = append(errs, fmt.Errorf("zklock: state %s: %w", slot, err))
		}
	}
	left, recorded := s.leaseLeft(run, now)
	switch {
	case run.exists && recorded && left <= 0:
		// The lease ran out: free, as a Redis key would have expired
		// (see runData), though the holder's session keeps the node.
	case run.exists:
		var err error
		if st, err = parseState(decodeRun(run.data).value); err != nil || st.Status != "running" {
			st = lock.State{Status: "foreign", Value: string(run.data)}
			errs = append(errs, fmt.Errorf("zklock: state %s: run node %w: %q", slot, lock.ErrForeign, run.data))
		} else {
			st.TTL = s.SessionTimeout()
			if recorded {
				st.TTL = left
			}
		}
	case d.done != "":
		st, _ = parseState(d.done)
		st.TTL = SlotTTL(sn.data, sn.stat, now)
	case now.Before(d.notBefore):
		st = lock.Value{NotBefore: d.notBefore}.State()
		st.TTL = d.notBefore.Sub(now)
	}
	st.Attempts = d.attempts
	return st, errors.Join(errs...)
}
