package kv

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/slotd/slotd/lock"
)

// The fleet's layout over Store:
//
//	replica/<replica id>   the instance nonce of the live process with that id (TTL: Announce's)
//	fleet/first-start      the fleet's first start, unix ms (TTL lock.FirstStartTTL, renewed by Started)
const (
	replicaDir = "replica"
	fleetDir   = "fleet"
	firstStart = "first-start"
)

// casTries bounds the compare-and-set rounds of one call: each lost round
// means another writer changed the entry in between, which two processes
// with one replica id (the case Announce reports) do at most a few times.
const casTries = 5

var errContended = errors.New("lock: the entry kept changing under the compare-and-set")

// Fleet is lock.Fleet over a Store.
type Fleet struct {
	kv   Store
	live bool
}

// NewFleet returns the fleet on s. With live, Announce lists the live
// replica ids (lock.Presence.Live): only for a store that sends
// lock.Taken notices, since a replica defers its slots to their preferred
// claimant on the strength of them.
func NewFleet(s Store, live bool) *Fleet { return &Fleet{kv: s, live: live} }

// Announce implements lock.Fleet.
func (f *Fleet) Announce(ctx context.Context, replica, instance string, ttl time.Duration) (lock.Presence, error) {
	if ttl <= 0 {
		return lock.Presence{}, fmt.Errorf("lock: announce replica %q: TTL %v must be positive", replica, ttl)
	}
	if replica == "" || instance == "" {
		return lock.Presence{}, fmt.Errorf("lock: announce replica %q instance %q: both must be non-empty", replica, instance)
	}
	for try := 0; ; try++ {
		e, err := f.kv.Get(ctx, replicaDir, replica)
		if err != nil {
			return lock.Presence{}, fmt.Errorf("lock: announce replica %q: %w", replica, err)
		}
		if e.Version != 0 && e.Value != instance {
			return lock.Presence{Other: e.Value, TTL: e.TTL}, nil
		}
		ok, err := f.kv.Put(ctx, replicaDir, replica, instance, e.Version, ttl)
		if err != nil {
			return lock.Presence{}, fmt.Errorf("lock: announce replica %q: %w", replica, err)
		}
		if ok {
			break
		}
		if try == casTries {
			return lock.Presence{}, fmt.Errorf("lock: announce replica %q: %w", replica, errContended)
		}
	}
	p := lock.Presence{TTL: ttl}
	if !f.live {
		return p, nil
	}
	all, err := f.kv.List(ctx, replicaDir)
	if err != nil {
		return lock.Presence{}, fmt.Errorf("lock: live replicas: %w", err)
	}
	p.Live = make([]string, 0, len(all))
	for id := range all {
		p.Live = append(p.Live, id)
	}
	return p, nil
}

// Withdraw implements lock.Fleet.
func (f *Fleet) Withdraw(ctx context.Context, replica, instance string) error {
	e, err := f.kv.Get(ctx, replicaDir, replica)
	if err == nil && e.Version != 0 && e.Value == instance {
		_, err = f.kv.Delete(ctx, replicaDir, replica, e.Version)
	}
	if err != nil {
		return fmt.Errorf("lock: withdraw replica %q: %w", replica, err)
	}
	return nil
}

// Started implements lock.Fleet.
func (f *Fleet) Started(ctx context.Context, now time.Time) (time.Time, error) {
	for try := 0; ; try++ {
		e, err := f.kv.Get(ctx, fleetDir, firstStart)
		if err != nil {
			return time.Time{}, fmt.Errorf("lock: first start: %w", err)
		}
		v := e.Value
		if e.Version == 0 {
			v = strconv.FormatInt(now.UnixMilli(), 10)
		} else if _, err := parseFirstStart(v); err != nil {
			return time.Time{}, err
		}
		// A record is written again to renew its TTL.
		ok, err := f.kv.Put(ctx, fleetDir, firstStart, v, e.Version, lock.FirstStartTTL)
		if err != nil {
			return time.Time{}, fmt.Errorf("lock: first start: %w", err)
		}
		if ok || (e.Version != 0 && try == casTries) {
			return parseFirstStart(v)
		}
		if try == casTries {
			return time.Time{}, fmt.Errorf("lock: first start: %w", errContended)
		}
	}
}

// FirstStart implements lock.Fleet.
func (f *Fleet) FirstStart(ctx context.Context) (time.Time, error) {
	e, err := f.kv.Get(ctx, fleetDir, firstStart)
	if err != nil {
		return time.Time{}, fmt.Errorf("lock: first start: %w", err)
	}
	if e.Version == 0 {
		return time.Time{}, nil
	}
	return parseFirstStart(e.Value)
}

func parseFirstStart(v string) (time.Time, error) {
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms <= 0 {
		return time.Time{}, fmt.Errorf("lock: first start (%s/%s): %w: %q", fleetDir, firstStart, lock.ErrForeign, v)
	}
	return time.UnixMilli(ms).UTC(), nil
}

// OnFleetChange implements lock.Fleet: a replica id appeared or went. On
// a fleet without a live set, f is never called.
func (f *Fleet) OnFleetChange(fn func()) (stop func()) {
	if !f.live {
		return func() {}
	}
	return f.kv.OnMembers(replicaDir, fn)
}

// Once implements lock.Oncer over s: one put-if-absent.
func Once(ctx context.Context, s Store, slot lock.Slot, event, value string, ttl time.Duration) (bool, error) {
	if ttl <= 0 {
		return false, fmt.Errorf("lock: once %s %s: TTL %v must be positive", slot, event, ttl)
	}
	ok, err := s.Put(ctx, "once", OnceName(slot, event), value, 0, ttl)
	if err != nil {
		return false, fmt.Errorf("lock: once %s %s: %w", slot, event, err)
	}
	return ok, nil
}

// OnceName is the name of slot's marker for event in the "once" directory.
func OnceName(slot lock.Slot, event string) string {
	return slot.Task + "/" + slot.ID + "/" + event
}
