package stats

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/slotd/slotd/lock"
)

// StoreCall is the result of one call to the store, as readiness needs it.
type StoreCall struct {
	Op   string         // "claim", "renew", "complete", "release" or "probe"
	Kind lock.ErrorKind // lock.KindNone: the store took it
	// Store, Code and Fix are the lock.StoreError's, if err was one:
	// which store refused, its own code ("OOM"), and what an operator does.
	Store, Code, Fix string
	Err              string    // the error, if any
	At               time.Time // when it came back, on the engine's clock
}

// Store counts the store's errors by kind and keeps the result of the
// last write (claim, renew, complete, release) and of the last write
// probe, which readiness and slotd_redis_up read.
type Store struct {
	Errors [lock.NumErrorKinds]Counter // by lock.ErrorKind; index 0 unused
	write  atomic.Pointer[StoreCall]
	probe  atomic.Pointer[StoreCall]
}

// Wrote records the result of a write op that ended at at, and returns
// the previous result and whether the kind changed. An error that is a
// protocol answer (lock.Classify says KindNone: not held, lease lost,
// cancelled) is not the store's failure and changes nothing. A success
// after a success allocates nothing, so a burst of claims costs no more.
func (s *Store) Wrote(op string, err error, at time.Time) (prev StoreCall, changed bool) {
	return s.record(&s.write, op, err, at)
}

// Probed records the result of a write probe, as Wrote does.
func (s *Store) Probed(err error, at time.Time) (prev StoreCall, changed bool) {
	return s.record(&s.probe, "probe", err, at)
}

func (s *Store) record(p *atomic.Pointer[StoreCall], op string, err error, at time.Time) (StoreCall, bool) {
	k := lock.Classify(err)
	if err != nil && k == lock.KindNone {
		return StoreCall{}, false
	}
	var prev StoreCall
	if old := p.Load(); old != nil {
		prev = *old
	}
	if err == nil {
		if prev.Kind == lock.KindNone && prev.Op != "" {
			return prev, false
		}
		p.Store(&StoreCall{Op: op, At: at})
		return prev, prev.Kind != lock.KindNone
	}
	s.Errors[k].Inc()
	c := &StoreCall{Op: op, Kind: k, Code: k.String(), Err: err.Error(), At: at}
	if se := (*lock.StoreError)(nil); errors.As(err, &se) {
		c.Store, c.Code, c.Fix = se.Store, se.Code, se.Fix
	}
	p.Store(c)
	return prev, prev.Kind != k
}

// LastWrite is the result of the last write recorded; zero if none.
func (s *Store) LastWrite() StoreCall { return load(&s.write) }

// LastProbe is the result of the last probe recorded; zero if none.
func (s *Store) LastProbe() StoreCall { return load(&s.probe) }

func load(p *atomic.Pointer[StoreCall]) StoreCall {
	if c := p.Load(); c != nil {
		return *c
	}
	return StoreCall{}
}
