package redislock

import (
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// doubts records, per slot and owner, what this Store knows of its own
// claims: whether the last one is in doubt — sent, and answered by no
// reply (a timeout, a dropped connection, a ctx that ended after the
// send), so it may have landed and counted an attempt that nobody runs —
// and the highest attempt a claim of it was answered won for.
//
// The next claim of a slot in doubt tells claim.lua so (its ARGV[a+8]: the
// least attempt it may take over), which then takes this owner's own
// "run:" value over as this claim — won, with the attempt it counted —
// instead of answering held and leaving the slot to wait out a lease, and
// costing an attempt (with max_attempts = 1, the slot). etcd (foundAgain)
// and ZooKeeper (its in-doubt record) find such a claim again the same
// way. A value of an attempt this owner was answered won for is never
// taken: that attempt ran (its release or completion may not have landed
// yet: model/slot.pml's M_TAKEOVER_RAN shows a second run of it).
//
// Taking the doubt is what sends the argument, so after one claim in
// doubt exactly one later claim of the slot can take the value over: two
// claims of one slot in one process (a backfill beside the schedule) never
// both run its attempt. A record lives until the slot's deadline, after
// which no claim of it can win; the map is swept of those past it when it
// grows, so it holds about one record per slot whose window is open.
type doubts struct {
	mu sync.Mutex
	m  map[doubtKey]*doubt
}

type doubtKey struct{ state, owner string }

type doubt struct {
	deadline time.Time // the slot's
	inDoubt  bool      // the last claim got no reply
	ran      int       // the highest attempt answered won
}

// maxDoubts is when a new record sweeps those past their deadline.
const maxDoubts = 4096

// record returns the record of owner's claims of state, made if absent.
func (d *doubts) record(state, owner string, deadline time.Time) *doubt {
	k := doubtKey{state, owner}
	if r := d.m[k]; r != nil {
		return r
	}
	if d.m == nil {
		d.m = map[doubtKey]*doubt{}
	}
	if len(d.m) >= maxDoubts {
		now := time.Now()
		for k, r := range d.m {
			if now.After(r.deadline) {
				delete(d.m, k)
			}
		}
	}
	r := &doubt{deadline: deadline}
	d.m[k] = r
	return r
}

// note records the answer to owner's claim of state, whose slot ends at
// deadline: an error of unknown outcome (not a reply from Redis, which
// means the script did not run, or answered) leaves it in doubt; won
// raises the attempts answered won.
func (d *doubts) note(state, owner string, deadline time.Time, won int, err error) {
	var reply redis.Error
	if err != nil && errors.As(err, &reply) || err == nil && won == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	r := d.record(state, owner, deadline)
	if err != nil {
		r.inDoubt = true
	}
	r.ran = max(r.ran, won)
}

// take is claim.lua's ARGV[a+8] for owner's next claim of state: "" if no
// claim of it is in doubt, else the least attempt the claim may take over
// (one more than any answered won). It clears the doubt.
func (d *doubts) take(state, owner string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	r := d.m[doubtKey{state, owner}]
	if r == nil || !r.inDoubt {
		return ""
	}
	r.inDoubt = false
	return strconv.Itoa(r.ran + 1)
}
