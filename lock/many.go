package lock

import (
	"context"
	"sync"
)

// ClaimRequest is one claim of a ClaimMany.
type ClaimRequest struct {
	Slot   Slot
	Owner  string // the owner id (see Owner.ID)
	Policy Policy
}

// ClaimReply is the answer to one ClaimRequest: a Claim, or the error
// Store.Claim would have returned (the outcome is unknown; do not run).
type ClaimReply struct {
	Claim
	Err error
}

// ClaimMany claims every request on s and calls f with each request's
// index and reply, one call at a time, on the caller's goroutine, as the
// replies come in (on Redis, in order); it returns when f has seen them
// all. It is how a replica claims the slots due at one instant: a Redis
// store queues them at once, so ten thousand claims leave in ceil(n/256)
// pipelined round trips, with no goroutine per claim, and the slots won in
// the first round trip can start before the last one is back. A store that
// cannot batch (Memory, Redlock, Redis under WithMinReplicasAck, or a
// wrapper that embeds a Store) gets the claims through Store.Claim, at
// most claimEachLimit at a time. Each claim ends with ctx.
func ClaimMany(ctx context.Context, s Store, reqs []ClaimRequest, f func(i int, r ClaimReply)) {
	if m, ok := s.(interface {
		ClaimMany(context.Context, []ClaimRequest, func(int, ClaimReply))
	}); ok {
		m.ClaimMany(ctx, reqs, f)
		return
	}
	claimEach(ctx, s, reqs, f)
}

// claimEachLimit bounds the concurrent Store.Claim calls of claimEach:
// enough to fill a batcher's pipelines, few enough that a burst does not
// start a goroutine per slot.
const claimEachLimit = 64

func claimEach(ctx context.Context, s Store, reqs []ClaimRequest, f func(int, ClaimReply)) {
	type answer struct {
		i int
		r ClaimReply
	}
	answers := make(chan answer, claimEachLimit)
	go func() { // the senders; the caller's goroutine hands the replies to f
		var wg sync.WaitGroup
		sem := make(chan struct{}, claimEachLimit)
		for i, q := range reqs {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				var a answer
				a.i = i
				a.r.Claim, a.r.Err = s.Claim(ctx, q.Slot, q.Owner, q.Policy)
				answers <- a
			}()
		}
		wg.Wait()
		close(answers)
	}()
	for a := range answers {
		f(a.i, a.r)
	}
}
