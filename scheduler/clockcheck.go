package scheduler

import (
	"context"
	"time"

	"github.com/slotd/slotd/lock"
)

// Ping timing, for a store that can tell a lost quorum (lock.Pinger): a
// quorum's loss shows within pingEvery + pingTimeout.
const (
	pingEvery   = 500 * time.Millisecond
	pingTimeout = time.Second
)

// clockLoop measures the store's reachability and clock skew, and probes
// that it takes writes, periodically. Between two checks it pings a store
// that can tell a lost quorum cheaply (lock.Pinger) every pingEvery:
// a failed ping makes the replica unready at once, and the next check
// (within recheckEvery) finds when the store is back.
func (s *Scheduler) clockLoop(ctx context.Context) {
	pinger, _ := s.store.(lock.Pinger)
	last := s.clock.Now()
	for {
		every := s.checkEvery
		if !s.storeOK.Load() {
			every = s.recheckEvery
		}
		wait := every - s.clock.Now().Sub(last)
		ping := pinger != nil && s.storeOK.Load() && wait > pingEvery
		if ping {
			wait = pingEvery
		}
		t := s.clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		if ping && s.clock.Now().Sub(last) < every {
			s.ping(ctx, pinger)
			continue
		}
		last = s.clock.Now()
		s.checkClock(ctx)
	}
}

// ping asks pinger whether a quorum answers, and on no answer marks the
// store unreachable (the clock check marks it reachable again).
func (s *Scheduler) ping(ctx context.Context, pinger lock.Pinger) {
	pctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	err := pinger.Ping(pctx)
	if err == nil || ctx.Err() != nil {
		return
	}
	if s.storeOK.Swap(false) {
		s.log.Warn("store unreachable: no quorum answered a ping", "err", err)
	}
}

// checkClock asks the store for its time once, and then, if it answered,
// probes that it takes writes (see Refused). The offset it measures is
// applied to the loop's fire times, so a replica whose clock is off still
// fires on the store's time; claims are checked against the store's clock
// anyway.
func (s *Scheduler) checkClock(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	t0 := s.clock.Now()
	st, err := s.store.Time(cctx)
	t1 := s.clock.Now()
	if err != nil {
		refused := lock.Classify(err).Refusal()
		if refused {
			// The clock read is refused as a write would be (ZooKeeper's
			// is a write; etcd's, a read the user needs a permission
			// for): the probe would not get further, and its fix, which
			// noteProbe logs, is this one's.
			s.noteProbe(err)
		}
		if wasOK := s.storeOK.Swap(false); (wasOK || s.skew.Load() == 0) && !refused {
			s.log.Warn("store unreachable", "err", err)
		}
		return
	}
	if !s.storeOK.Swap(true) {
		s.log.Info("store reachable")
	}
	s.probe(cctx)
	s.renewPresence(cctx)
	s.renewStarted(cctx)
	rtt := t1.Sub(t0)
	skew := st.Sub(t0.Add(rtt / 2))
	// Below the measurement's own uncertainty the skew is noise.
	if skew.Abs() <= rtt/2+time.Millisecond {
		skew = 0
	}
	s.skew.Store(int64(skew))
	s.offset.Store(int64(skew))
	if limit := s.maxSkew; limit > 0 && skew.Abs() > limit {
		s.log.Warn("clock skew against the store exceeds max_clock_skew", "skew", skew, "max", limit)
	}
}
