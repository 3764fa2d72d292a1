package lock

import (
	"context"
	"sync"
	"time"
)

// ClaimRequest is one claim of a ClaimMany.
type ClaimRequest struct {
	Slot    Slot
	Replica string
	Policy  Policy
}

// ClaimReply is the answer to one ClaimRequest: a Claim, or the error
// Store.Claim would have returned (the outcome is unknown; do not run).
type ClaimReply struct {
	Claim
	Err error
}

// ClaimMany claims every request on s and returns the replies in order.
// It is how a replica claims the slots due at one instant: a Redis store
// queues them at once, so ten thousand claims leave in ceil(n/256)
// pipelined round trips, with no goroutine per claim. A store that cannot
// batch (Memory, Redlock, Redis under WithMinReplicasAck, or a wrapper
// that embeds a Store) gets the claims through Store.Claim, at most
// claimEachLimit at a time. Each reply ends with ctx.
func ClaimMany(ctx context.Context, s Store, reqs []ClaimRequest) []ClaimReply {
	if m, ok := s.(interface {
		ClaimMany(context.Context, []ClaimRequest) []ClaimReply
	}); ok {
		return m.ClaimMany(ctx, reqs)
	}
	return claimEach(ctx, s, reqs)
}

// claimEachLimit bounds the concurrent Store.Claim calls of claimEach:
// enough to fill a batcher's pipelines, few enough that a burst does not
// start a goroutine per slot.
const claimEachLimit = 64

func claimEach(ctx context.Context, s Store, reqs []ClaimRequest) []ClaimReply {
	out := make([]ClaimReply, len(reqs))
	var wg sync.WaitGroup
	sem := make(chan struct{}, claimEachLimit)
	for i, q := range reqs {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			out[i].Claim, out[i].Err = s.Claim(ctx, q.Slot, q.Replica, q.Policy)
		}()
	}
	wg.Wait()
	return out
}

// ClaimMany claims every request in as few round trips as the batcher
// allows; see the package function ClaimMany.
func (r *Redis) ClaimMany(ctx context.Context, reqs []ClaimRequest) []ClaimReply {
	if r.ack.n > 0 { // WAIT needs the connection that wrote: one call each
		return claimEach(ctx, r, reqs)
	}
	calls := make([]*scriptCall, len(reqs))
	for i, q := range reqs {
		keys, args := claimArgs(r.prefix, q.Slot, q.Replica, q.Policy)
		calls[i] = newCall(ctx, claimScript, keys, args)
	}
	sent := time.Now()
	r.batch.enqueue(calls...)
	out := make([]ClaimReply, len(reqs))
	for i, c := range calls {
		out[i].Claim, out[i].Err = r.claimReply(c.wait(), reqs[i].Slot, sent)
	}
	return out
}
