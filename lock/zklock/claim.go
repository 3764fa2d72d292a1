package zklock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/slotd/slotd/lock"
)

// maxRaces is how many times an operation reads again after losing a race
// (a version check or a create that another replica's write beat).
const maxRaces = 20

// read reads the slot node and the run node of slot at once (one round
// trip, two requests in flight), without watches: what a watched slot
// needs armed is the watcher's (see Store.Watch, watcher.afterClaim).
func (s *Store) read(ctx context.Context, slot lock.Slot) (sn, run node, err error) {
	var runErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		run, runErr = s.get(ctx, s.RunPath(slot), false)
	}()
	sn, err = s.get(ctx, s.SlotPath(slot), false)
	<-done
	if err == nil {
		err = runErr
	}
	if err != nil {
		return node{}, node{}, fmt.Errorf("zklock: read %s: %w", slot, err)
	}
	return sn, run, nil
}

// get reads path; with watch it leaves a watch on it, whether it exists or
// not.
func (s *Store) get(ctx context.Context, path string, watch bool) (node, error) {
	for {
		var b []byte
		var st *zk.Stat
		var err error
		_, err = call(ctx, func() (struct{}, error) {
			var err error
			if watch {
				b, st, _, err = s.conn.GetW(path)
			} else {
				b, st, err = s.conn.Get(path)
			}
			return struct{}{}, err
		})
		switch {
		case err == nil:
			return node{data: b, stat: st, exists: true}, nil
		case !errors.Is(err, zk.ErrNoNode):
			return node{}, err
		case !watch:
			return node{}, nil
		}
		// Missing: watch for its creation. If it was created in between,
		// read it again.
		ok, err := call(ctx, func() (bool, error) { ok, _, _, err := s.conn.ExistsW(path); return ok, err })
		if err != nil {
			return node{}, err
		}
		if !ok {
			return node{}, nil
		}
	}
}

// Claim implements lock.Store: one multi-op counts the attempt and creates
// the ephemeral run node, under a check of the slot node's version.
func (s *Store) Claim(ctx context.Context, slot lock.Slot, replica string, p lock.Policy) (lock.Claim, error) {
	c, err := s.claim(ctx, slot, replica, p)
	switch {
	case err != nil:
		s.watch.afterClaim(slot, c, err, node{}, node{})
	case c.Result == lock.Won:
		s.watch.see(s.SlotPath(slot), true) // its next claim reads first
	}
	return c, err
}

func (s *Store) claim(ctx context.Context, slot lock.Slot, replica string, p lock.Policy) (lock.Claim, error) {
	if p.Lease > s.SessionTimeout() {
		return lock.Claim{}, fmt.Errorf("zklock: claim %s: lease %v, session timeout %v: %w", slot, p.Lease, s.SessionTimeout(), ErrLeaseOverSession)
	}
	sent := time.Now()
	path := s.RunPath(slot)
	if orphan, ok := s.orphans.Load(path); ok {
		if err := s.freeOrphan(ctx, path, orphan.(string)); err != nil {
			return lock.Claim{}, fmt.Errorf("zklock: claim %s: freeing the run node of a failed release: %w", slot, err)
		}
	}
	for i := range maxRaces {
		v, _ := s.doubt.Load(path)
		inDoubt, _ := v.(doubt)
		if i == 0 && inDoubt.value == "" {
			created, err := s.createFresh(ctx, slot, p)
			if err != nil {
				return lock.Claim{Sent: sent}, err
			}
			if created {
				c, err := s.write(ctx, slot, replica, p, sent, slotData{ttl: p.DoneTTL}, node{stat: &zk.Stat{}, exists: true}, node{})
				if !errors.Is(err, errRace) {
					return c, err
				}
				continue
			}
		}
		c, sn, run, d, err := s.decide(ctx, slot, inDoubt.value, p)
		if err == nil && inDoubt.value != "" && !run.exists && sn.exists && sn.stat.Version > inDoubt.version {
			// The slot node has moved past the version the claim in doubt
			// checked: it did not land, and never will.
			s.doubt.CompareAndDelete(path, inDoubt)
		}
		if err != nil || c.Result != 0 {
			c.Sent = sent
			if err == nil {
				s.watch.afterClaim(slot, c, nil, sn, run)
			}
			return c, err
		}
		if run.exists && !run.expired {
			// Our own earlier claim, whose reply was lost (the connection
			// dropped, or its ctx ended, after it was sent): it landed, and
			// no attempt ran under it. It is this claim now, once
			// rewritten: peers judge its lease from the node's mtime, which
			// must not be older than this claim's send time, from which
			// its holder counts. The write is version-checked, so a peer
			// that found its lease run out and took it over first wins.
			// The record stays until this write is answered: if its reply
			// is lost too, the next claim takes the node up again.
			res, err := s.multi(ctx,
				&zk.CheckVersionRequest{Path: s.SlotPath(slot), Version: sn.stat.Version},
				&zk.SetDataRequest{Path: path, Data: runData{value: inDoubt.value, lease: p.Lease}.encode(), Version: run.stat.Version})
			if lost(err) {
				continue
			}
			if err != nil {
				return lock.Claim{}, fmt.Errorf("zklock: claim %s: taking up its own claim in doubt: %w", slot, err)
			}
			s.doubt.CompareAndDelete(path, inDoubt)
			prior := slotData{attempts: d.attempts - 1, base: d.base, ttl: d.ttl}
			return s.landed(ctx, slot, p, sent, d, prior, sn.stat.Version, res[1].Stat.Version,
				runData{value: inDoubt.value, lease: p.Lease}.encode(), time.UnixMilli(run.stat.Ctime).UTC(), run.stat.Czxid)
		}
		if !sn.exists {
			// The slot's first claim: make its node, at version 0 (if
			// another replica made it first, read again).
			d = slotData{ttl: p.DoneTTL}
			created, err := s.createTTL(ctx, slot.Task, s.SlotPath(slot), d.encode(), p.DoneTTL)
			if err != nil {
				return lock.Claim{}, fmt.Errorf("zklock: claim %s: %w", slot, err)
			}
			if !created {
				continue
			}
			sn = node{data: d.encode(), stat: &zk.Stat{}, exists: true}
		}
		c, err = s.write(ctx, slot, replica, p, sent, d, sn, run)
		if errors.Is(err, errRace) {
			continue
		}
		return c, err
	}
	return lock.Claim{}, fmt.Errorf("zklock: claim %s: lost %d races in a row", slot, maxRaces)
}

// errRace: a claim's multi-op lost a race (a version check or a create
// that another write beat); the claim reads again.
var errRace = errors.New("zklock: lost a race")

// createFresh creates slot's node for its first claim, when the slot's
// window is open by the bounds of the leader's clock, without reading
// first: in a burst, the preferred claimant's claim is nearly always the
// slot's first, and the reads would only find nothing. created is false
// if the window is not known open, the node exists, or this store's last
// claim of the slot was in doubt or its release failed: the claim then
// reads and decides as usual.
func (s *Store) createFresh(ctx context.Context, slot lock.Slot, p lock.Policy) (created bool, err error) {
	if p.MaxAttempts < 1 || !s.fresh(slot) {
		return false, nil
	}
	lo, hi, err := s.now(ctx)
	if err != nil {
		return false, fmt.Errorf("zklock: claim %s: %w", slot, err)
	}
	if lo.Before(slot.Time.Add(-p.Tolerance)) || !hi.Before(slot.Deadline) {
		return false, nil
	}
	d := slotData{ttl: p.DoneTTL}
	created, err = s.createTTL(ctx, slot.Task, s.SlotPath(slot), d.encode(), p.DoneTTL)
	if err != nil {
		return false, fmt.Errorf("zklock: claim %s: %w", slot, err)
	}
	return created, nil
}

// write is a claim's multi-op, from the slot node sn holding d and the run
// node run (an expired one goes in the same transaction): count attempt
// d.attempts+1 and create the run node. errRace: another write came first.
func (s *Store) write(ctx context.Context, slot lock.Slot, replica string, p lock.Policy, sent time.Time, d slotData, sn, run node) (lock.Claim, error) {
	path := s.RunPath(slot)
	n := d.attempts + 1
	owner := lock.Owner{ID: replica, Attempt: n}
	next := slotData{attempts: n, base: d.base, ttl: d.ttl}
	rd := runData{value: lock.Value{Owner: owner}.String(), lease: p.Lease}.encode()
	ops := []any{
		&zk.SetDataRequest{Path: s.SlotPath(slot), Data: next.encode(), Version: sn.stat.Version},
		&zk.CreateRequest{Path: path, Data: rd, Acl: s.acl, Flags: zk.FlagEphemeral},
	}
	if run.expired {
		// A holder whose lease ran out, its session alive: its
		// watchdog stopped its task a tenth of a lease ago at least.
		// Its node goes in the same transaction, unless renewed since.
		ops = append([]any{&zk.DeleteRequest{Path: path, Version: run.stat.Version}}, ops...)
	}
	msent := time.Now()
	res, err := s.multi(ctx, ops...)
	if lost(err) {
		return lock.Claim{}, errRace
	}
	if err != nil {
		// The multi-op may have been committed, or may be yet (a call
		// whose ctx ended goes on): the next claims of the slot look
		// for its run node.
		s.doubt.Store(path, doubt{lock.Value{Owner: owner}.String(), sn.stat.Version})
		return lock.Claim{}, fmt.Errorf("zklock: claim %s: %w", slot, err)
	}
	s.doubt.Delete(path) // an earlier claim in doubt checked an older version
	st := res[len(res)-2].Stat
	at := time.UnixMilli(st.Mtime).UTC()
	s.note(reading{mtime: at, sent: msent, recv: time.Now(), epoch: epochOf(st.Mzxid)})
	return s.landed(ctx, slot, p, sent, next, d, st.Version, 0, rd, at, st.Mzxid)
}

// doubt is a claim whose outcome is unknown: its run value, and the slot
// node's version its multi-op checked.
type doubt struct {
	value   string
	version int32
}

// landed reports the claim that wrote d (from prior) into the slot node,
// leaving it at slotVersion, and created the run node, holding rd, at
// runVersion, in a transaction the leader stamped at and numbered zxid.
// The leader's stamp has the last word: a claim that landed outside the
// window (a new leader, another clock) is undone, attempt and all. A claim
// won is kept as a hold (holds.go).
func (s *Store) landed(ctx context.Context, slot lock.Slot, p lock.Policy, sent time.Time, d, prior slotData, slotVersion, runVersion int32, rd []byte, at time.Time, zxid int64) (lock.Claim, error) {
	earliest := slot.Time.Add(-p.Tolerance)
	if !at.Before(earliest) && at.Before(slot.Deadline) {
		s.holds.Store(s.RunPath(slot), &hold{slot: d, slotVersion: slotVersion, run: rd, runVersion: runVersion})
		return lock.Claim{Result: lock.Won, Attempt: d.attempts, Base: d.base, Now: at, Sent: sent, Revision: zxid}, nil
	}
	_, err := call(context.WithoutCancel(ctx), func() ([]zk.MultiResponse, error) {
		return s.conn.Multi(
			&zk.DeleteRequest{Path: s.RunPath(slot), Version: runVersion},
			&zk.SetDataRequest{Path: s.SlotPath(slot), Data: prior.encode(), Version: slotVersion},
		)
	})
	if err != nil {
		return lock.Claim{}, fmt.Errorf("zklock: claim %s landed at %v, outside its window, and could not be undone: %w", slot, at, err)
	}
	if at.Before(earliest) {
		return lock.Claim{Result: lock.Early, Wait: earliest.Sub(at), Now: at, Sent: sent}, nil
	}
	return lock.Claim{Result: lock.Late, Now: at, Sent: sent}, nil
}

// decide reads slot and answers every result but Won (c.Result set); with
// c.Result 0 the slot may be claimed, from the slot node sn holding d, or,
// if run exists, it holds inDoubt, the run value of this store's claim of
// the slot whose outcome was unknown, made on this very session (see
// Claim). A run node of this replica's that was not in doubt (its
// attempt ran, and its release failed) is held, as anybody's: its
// attempt number must not run twice.
func (s *Store) decide(ctx context.Context, slot lock.Slot, inDoubt string, p lock.Policy) (c lock.Claim, sn, run node, d slotData, err error) {
	readAt := time.Now()
	sn, run, err = s.read(ctx, slot)
	if err != nil {
		return c, sn, run, d, err
	}
	lo, hi, err := s.now(ctx)
	if err != nil {
		return c, sn, run, d, fmt.Errorf("zklock: claim %s: %w", slot, err)
	}
	c.Now = lo
	if run.exists {
		rd := decodeRun(run.data)
		st, err := parseState(rd.value)
		if err != nil || st.Status != "running" {
			return c, sn, run, d, fmt.Errorf("zklock: claim %s: run node %w: %q", slot, lock.ErrForeign, run.data)
		}
		left, recorded := s.leaseLeft(run, lo)
		mine := inDoubt != "" && rd.value == inDoubt && run.stat.EphemeralOwner == s.conn.SessionID()
		if !mine && recorded && left <= 0 {
			// Run out by a reading that may be older than the node's
			// read, and so blind to an election since, which gives the
			// holder a new lease (leaseLeft): judged again by a reading
			// taken after the read.
			if lo, hi, err = s.nowAfter(ctx, readAt); err != nil {
				return c, sn, run, d, fmt.Errorf("zklock: claim %s: %w", slot, err)
			}
			c.Now = lo
			left, recorded = s.leaseLeft(run, lo)
		}
		switch {
		case mine:
			if d, err = decodeSlot(sn.data); err != nil || !sn.exists || d.attempts != st.Attempt {
				return c, sn, run, d, fmt.Errorf("zklock: claim %s: run node of attempt %d beside slot node %q: %w", slot, st.Attempt, sn.data, lock.ErrForeign)
			}
			return c, sn, run, d, nil
		case recorded && left <= 0:
			// The lease ran out by the leader's clock: the holder's
			// watchdog has cancelled its task, though its session may live
			// on (a holder frozen for less than the session timeout). The
			// slot is free; the claim deletes the node, unless renewed or
			// completed since (its multi-op checks the node's version).
			run.expired = true
			if d, err = decodeSlot(sn.data); err != nil || !sn.exists {
				return c, sn, run, d, fmt.Errorf("zklock: claim %s: run node of attempt %d beside slot node %q: %w", slot, st.Attempt, sn.data, lock.ErrForeign)
			}
		default:
			c.Result, c.Holder, c.Instance, c.Attempt = lock.Held, st.Holder, st.Instance, st.Attempt
			// Look again when the lease runs out (a lease, for a node
			// held by its session alone), if no watch event comes first.
			c.Wait = p.Lease
			if recorded {
				c.Wait = min(left, p.Lease)
			}
			return c, sn, run, d, nil
		}
	}
	if sn.exists {
		if d, err = decodeSlot(sn.data); err != nil {
			return c, sn, run, d, fmt.Errorf("zklock: claim %s: %w", slot, err)
		}
		if d.done != "" {
			st, _ := parseState(d.done)
			c.Result, c.Holder, c.Instance, c.Attempt = lock.Done, st.Holder, st.Instance, st.Attempt
			return c, sn, run, d, nil
		}
		// A retry backoff: early (or late) until it ends by the leader's
		// clock's lower bound; the claim's write then clears it.
		if !d.notBefore.IsZero() {
			if bc, waits := c.AfterBackoff(slot, lock.Value{NotBefore: d.notBefore}, lo); waits {
				return bc, sn, run, d, nil
			}
		}
	}
	if earliest := slot.Time.Add(-p.Tolerance); lo.Before(earliest) {
		c.Result, c.Wait = lock.Early, earliest.Sub(lo)
		return c, sn, run, d, nil
	}
	if !hi.Before(slot.Deadline) {
		c.Result = lock.Late
		return c, sn, run, d, nil
	}
	c.Base = d.base
	if d.attempts-d.base >= p.MaxAttempts || d.attempts >= lock.MaxAttempts {
		c.Result, c.Attempt = lock.Exhausted, d.attempts
	}
	return c, sn, run, d, nil
}

// lost reports whether err means another write came first (the caller
// reads again).
func lost(err error) bool {
	return errors.Is(err, zk.ErrBadVersion) || errors.Is(err, zk.ErrNodeExists) || errors.Is(err, zk.ErrNoNode)
}
