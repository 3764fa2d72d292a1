package redislock

import (
	"context"
	"time"

	"github.com/slotd/slotd/lock"
)

// ClaimMany claims every request in as few round trips as the batcher
// allows; see the package function ClaimMany.
func (r *Store) ClaimMany(ctx context.Context, reqs []lock.ClaimRequest, f func(int, lock.ClaimReply)) {
	if r.ack.n > 0 { // WAIT needs the connection that wrote: one call each
		lock.ClaimMany(ctx, struct{ lock.Store }{r}, reqs, f) // one Store.Claim each
		return
	}
	sreqs := make([]scriptReq, len(reqs))
	for i, q := range reqs {
		keys, args := r.claimArgs(q.Slot, q.Owner, q.Policy)
		sreqs[i] = scriptReq{script: claimScript, keys: keys, args: args}
	}
	sent := time.Now()
	calls := r.batch.queue(ctx, sreqs...)
	for i, c := range calls {
		var rep lock.ClaimReply
		var again bool
		rep.Claim, rep.Err, again = r.claimReply(wait(c), reqs[i].Slot, reqs[i].Owner, sent)
		if again { // found held by its own lost claim: once more, asking for it
			q := reqs[i]
			keys, args := r.claimArgs(q.Slot, q.Owner, q.Policy)
			resent := time.Now()
			rep.Claim, rep.Err, _ = r.claimReply(r.batch.run(ctx, claimScript, keys, args...), q.Slot, q.Owner, resent)
		}
		f(i, rep)
	}
}
