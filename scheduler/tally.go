package scheduler

import (
	"context"
	"time"

	"github.com/slotd/slotd/lock"
)

// Tallies. A deferring replica reads each slot it left to its preferred
// claimant (deferral.go), and every deferring replica reads every such
// slot: on Redis a key lookup per slot per deferring replica, most of
// what a slot costs the store beyond its claim and completion once a
// fleet grows (5,000 slots/s: 24.5 µs a slot at 3 replicas, 32.2 at 12;
// with no read at all, 23.0 and 22.2).
//
// On a store that batches deferrals (lock.Peeker) the preferred claimant
// says in one write per fire time what it claimed: once every claim it
// sent at once of its slots due then is answered won, held or done, it
// writes the sum of those slots' hashes (slotHash). A deferring replica
// keeps the same sum, per fire time and claimant, over the slots it left
// to that claimant; when its deferral is read, a slot whose claimant's
// tally equals it is read as held without a read of its own. Equal sums
// say that both replicas chose the same slots for the claimant and that
// the claimant's claim of each found it taken: whatever made their views
// differ (a live set or a config read at another time, a paused task, a
// claimant at max_running or whose claim failed) makes them unequal, and
// then the slots are read as before. A tally not in when the deferral is
// first read (its claimant's claims still out; a dead claimant) is looked
// for again at the deferral's limit, when a slot read free would be read
// again anyway; at the limit its slots are read.
//
// Only a slot whose lease outlasts its window (leaseOutlasts) is read so:
// held, it would only be listed until its deadline anyway. A held slot
// becomes free again within its window only by a release (a failed
// attempt's, an operator's rerun), whose notice a listed slot hears as
// before. A notice heard before its slot was listed (this replica fired
// it late: a clock behind its peers', a busy loop) is remembered for the
// task's lease and its tolerance, and the slot is claimed when it is
// listed; if the notices remembered overflow, tallies are not trusted
// until the forgotten ones are past.

// tallyTTL is how long a tally is kept: many times the longest a
// deferral waits (deferLimit) before its read.
const tallyTTL = time.Minute

// tallyLater is the least time before a deferral's limit for a slot whose
// claimant's tally is not in yet to wait for it: a read of the deferral's
// answer comes back well within it.
const tallyLater = 20 * time.Millisecond

// heardMax bounds the release notices remembered for slots not listed.
const heardMax = 100_000

// tallyKey is a claimant's tally: its fire time (unix ms) and its id.
type tallyKey struct {
	at int64
	by string
}

// ownTally is this replica's tally of its slots due at one time: the sum
// of those whose claims were answered taken, the claims sent and answered,
// and whether any answer said otherwise.
type ownTally struct {
	sum            uint64
	sent, answered int
	bad            bool
	seen           time.Time // local clock: its first claim sent
}

// expected is what this replica expects of a claimant's tally.
type expected struct {
	sum  uint64
	seen time.Time // local clock: its first slot listed (a clock read per slot cost 5% of a deferred slot)
}

// tallies is a loop's state for them, nil maps if the store keeps none.
type tallies struct {
	tallier lock.Peeker // the loop's peeker; nil: tallies not kept (tests of the read alone)
	own     map[int64]*ownTally
	expect  map[tallyKey]*expected
	// heard: release notices of slots not listed, until when each is
	// remembered; distrustUntil: tallies are not trusted before then,
	// since notices were forgotten.
	heard         map[slotName]time.Time
	distrustUntil time.Time
	pruned        time.Time
}

// slotHash is a slot's term in a tally.
func slotHash(slot lock.Slot) uint64 { return mix(fnv1a(fnvOffset, slot.Task, ":", slot.ID)) }

// startTallies keeps tallies: deferrals are batched (l.peeker is set).
func (l *loop) startTallies() {
	l.tally = tallies{tallier: l.peeker, own: map[int64]*ownTally{}, expect: map[tallyKey]*expected{}, heard: map[slotName]time.Time{}}
}

// tallySent counts a claim of slot this replica sends at once as its
// preferred claimant.
func (l *loop) tallySent(slot lock.Slot) {
	at := slot.Time.UnixMilli()
	o := l.tally.own[at]
	if o == nil {
		o = &ownTally{seen: l.s.clock.Now()}
		l.tally.own[at] = o
	}
	o.sent++
}

// tallyAnswered counts the answer to such a claim: taken (won, held or
// done) or not. When every claim of its fire time is answered taken, the
// tally is written.
func (l *loop) tallyAnswered(slot lock.Slot, taken bool) {
	at := slot.Time.UnixMilli()
	o := l.tally.own[at]
	if o == nil {
		return // pruned: too old to matter
	}
	o.answered++
	if !taken {
		o.bad = true
	} else {
		o.sum += slotHash(slot)
	}
	if o.answered != o.sent || o.bad || o.sum == 0 {
		return
	}
	tl, replica, sum, log := l.tally.tallier, l.s.replica, o.sum, l.s.log
	l.workers.Add(1)
	go func() {
		defer l.workers.Done()
		ctx, cancel := context.WithTimeout(l.ctx, time.Second)
		defer cancel()
		if err := tl.Tally(ctx, time.UnixMilli(at), replica, sum, tallyTTL); err != nil && l.ctx.Err() == nil {
			// Its peers read the slots instead.
			log.Debug("writing this replica's tally failed", "at", time.UnixMilli(at), "err", err)
		}
	}()
}

// tallyDeferred adds slot, left to claimant by, to what this replica
// expects by's tally to be. It reports false if the slot's release was
// heard before it was listed: then it is claimed, not listed.
func (l *loop) tallyDeferred(slot lock.Slot, by string) bool {
	if len(l.tally.heard) > 0 {
		name := slotName{slot.Task, slot.ID}
		if _, ok := l.tally.heard[name]; ok {
			delete(l.tally.heard, name)
			return false
		}
	}
	k := tallyKey{slot.Time.UnixMilli(), by}
	e := l.tally.expect[k]
	if e == nil {
		e = &expected{seen: l.s.clock.Now()}
		l.tally.expect[k] = e
	}
	e.sum += slotHash(slot)
	return true
}

// heardUnlisted remembers a release notice of a slot not listed, for the
// longest it could still be listed: its task's lease and tolerance (a
// slot read by tally has a lease that outlasts its window).
func (l *loop) heardUnlisted(name slotName) {
	t := l.current[name.task]
	if t == nil {
		return
	}
	now := l.s.clock.Now()
	if len(l.tally.heard) >= heardMax {
		l.pruneTallies(now, true)
		if len(l.tally.heard) >= heardMax {
			clear(l.tally.heard)
			l.tally.distrustUntil = now.Add(tallyTTL)
			l.s.log.Warn("too many release notices of slots not listed to remember; reading every deferred slot for a minute",
				"notices", heardMax)
		}
	}
	l.tally.heard[name] = now.Add(t.Lease + t.Tolerance)
}

// pruneTallies forgets the tallies first added to tallyTTL ago and the
// notices past their time, at most once a second unless forced.
func (l *loop) pruneTallies(now time.Time, force bool) {
	if !force && now.Sub(l.tally.pruned) < time.Second {
		return
	}
	l.tally.pruned = now
	old := now.Add(-tallyTTL)
	for at, o := range l.tally.own {
		if o.seen.Before(old) {
			delete(l.tally.own, at)
		}
	}
	for k, e := range l.tally.expect {
		if e.seen.Before(old) {
			delete(l.tally.expect, k)
		}
	}
	for name, until := range l.tally.heard {
		if !now.Before(until) {
			delete(l.tally.heard, name)
		}
	}
}

// tallyAsk is one claimant's tally a deferral's read compares: what this
// replica expects of it, and the slots it covers (indexes in the
// deferral).
type tallyAsk struct {
	key    tallyKey
	expect uint64
	slots  []int
}

// tallyAsks lists the tallies that may spare d's read of its slots: those
// of the slots whose lease outlasts their window.
func (l *loop) tallyAsks(d *deferral) []tallyAsk {
	if l.tally.tallier == nil || l.s.clock.Now().Before(l.tally.distrustUntil) {
		return nil
	}
	var asks []tallyAsk
	index := map[tallyKey]int{}
	for i, x := range d.slots {
		if x.by == "" || x.gone || !x.outlasts {
			continue
		}
		k := tallyKey{x.slot.Time.UnixMilli(), x.by}
		j, ok := index[k]
		if !ok {
			j = len(asks)
			index[k] = j
			var sum uint64
			if e := l.tally.expect[k]; e != nil {
				sum = e.sum
			}
			asks = append(asks, tallyAsk{key: k, expect: sum})
		}
		asks[j].slots = append(asks[j].slots, i)
	}
	return asks
}

// readTallies reads asks' tallies, one read per fire time, and reports
// the slots their claimants' tallies cover (none if the store could not
// answer: then they are read).
func readTallies(ctx context.Context, tl lock.Peeker, asks []tallyAsk, n int) []bool {
	covered := make([]bool, n)
	byTime := map[int64][]int{}
	var times []int64
	for j, a := range asks {
		if _, ok := byTime[a.key.at]; !ok {
			times = append(times, a.key.at)
		}
		byTime[a.key.at] = append(byTime[a.key.at], j)
	}
	for _, at := range times {
		js := byTime[at]
		ids := make([]string, len(js))
		for i, j := range js {
			ids[i] = asks[j].key.by
		}
		sums, err := tl.Tallies(ctx, time.UnixMilli(at), ids)
		if err != nil || len(sums) != len(ids) {
			continue
		}
		for i, j := range js {
			if sums[i] == 0 || sums[i] != asks[j].expect {
				continue
			}
			for _, s := range asks[j].slots {
				covered[s] = true
			}
		}
	}
	return covered
}
