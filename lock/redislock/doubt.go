package redislock

import (
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/lock"
)

// doubts records, per slot and owner, what this Store knows of its own
// claims: how many are in flight, whether the last one is in doubt, and
// the highest attempt a claim was answered won for.
//
// A claim is in doubt when it was sent and answered by no reply (a
// timeout, a dropped connection, a ctx that ended after the send), or
// answered held by the owner's own value of an attempt it was never
// answered won for (go-redis resent it after a network error, and the
// first send had landed). Either way it may have counted an attempt that
// nobody runs. The next claim of the slot tells claim.lua so (its
// ARGV[a+4]: the least attempt it may take over), which then takes this
// owner's own "run:" value over as this claim — won, with the attempt it
// counted — instead of answering held and leaving the slot to wait out a
// lease, and costing an attempt (with max_attempts = 1, the slot). etcd
// (foundAgain) and ZooKeeper (its in-doubt record) find such a claim again
// the same way.
//
// What keeps a take-over to a claim nobody runs:
//   - a value of an attempt this owner was answered won for is never
//     taken: that attempt ran, and its release or completion may not have
//     landed yet (model/slot.pml's M_TAKEOVER_RAN shows it run twice);
//   - the doubt is asked about only while no other claim of the slot by
//     this owner is in flight (a backfill beside the schedule), whose won
//     value it would otherwise take, and taking it is what sends it, so
//     one claim at most carries it.
//
// A take-over is asked for once per slot and owner: a claimant whose
// replies keep getting lost would otherwise set its own claim's lease
// again and again, holding the slot through its window while running
// nothing and its peers wait; after one, it waits out its claim's lease
// as before (that lost reply costs an attempt).
//
// A record lives until the slot's deadline, after which no claim of it
// can win; the map is swept of those past it when it has doubled since the
// last sweep, so it holds about one record per slot whose window is open
// and a sweep's cost is shared by the records added since the last one. (A
// sweep at every new record past a fixed size, as before, cost each claim
// the whole map once more slots than that were open: at 10,000 slots a
// second, a replica spent every core sweeping and sent no claim.)
type doubts struct {
	mu      sync.Mutex
	m       map[doubtKey]*doubt
	sweepAt int // the size at which a new record sweeps; maxDoubts at least
	visited int // records looked at by sweeps, for the test of their cost
}

type doubtKey struct{ state, owner string }

type doubt struct {
	deadline time.Time // the slot's
	inFlight int       // claims sent and not answered
	inDoubt  bool      // a claim got no reply, or found its own value
	asked    bool      // a claim has asked for the take-over: never again
	ran      int       // the highest attempt answered won
}

// maxDoubts is the least size at which a new record sweeps those past
// their deadline.
const maxDoubts = 4096

// record returns the record of owner's claims of state, made if absent.
func (d *doubts) record(k doubtKey, deadline time.Time) *doubt {
	if r := d.m[k]; r != nil {
		return r
	}
	if d.m == nil {
		d.m = map[doubtKey]*doubt{}
	}
	if len(d.m) >= max(d.sweepAt, maxDoubts) {
		now := time.Now()
		d.visited += len(d.m)
		for k, r := range d.m {
			if now.After(r.deadline) && r.inFlight == 0 {
				delete(d.m, k)
			}
		}
		d.sweepAt = 2 * len(d.m)
	}
	r := &doubt{deadline: deadline}
	d.m[k] = r
	return r
}

// send counts owner's claim of state, whose slot ends at deadline, in
// flight, and returns its ARGV[a+4]: "" unless a claim of it is in doubt,
// none is in flight and none asked before, else the least attempt it may
// take over (one above any answered won), and the doubt is cleared.
func (d *doubts) send(state, owner string, deadline time.Time) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	r := d.record(doubtKey{state, owner}, deadline)
	r.inFlight++
	if !r.inDoubt || r.asked || r.inFlight > 1 {
		return ""
	}
	r.inDoubt, r.asked = false, true
	return strconv.Itoa(r.ran + 1)
}

// answered records the answer to owner's claim of state: c, or err. An
// error of unknown outcome (not a reply from Redis, which means the
// script did not run, or answered) leaves a doubt. It reports whether the
// claim should be sent again at once: it was answered held by owner's own
// value of an attempt never answered won, with no other claim in flight.
func (d *doubts) answered(state, owner string, c lock.Claim, err error) (again bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	r := d.m[doubtKey{state, owner}]
	if r == nil { // swept: no claim can win any more
		return false
	}
	r.inFlight--
	var reply redis.Error
	switch {
	case err != nil:
		r.inDoubt = r.inDoubt || !errors.As(err, &reply)
	case c.Result == lock.Won:
		r.ran = max(r.ran, c.Attempt)
	case c.Result == lock.Held && lock.OwnerID(c.Holder, c.Instance) == owner && c.Attempt > r.ran && r.inFlight == 0 && !r.asked:
		r.inDoubt = true
		return true
	}
	return false
}
