package zklock

import (
	"context"

	"github.com/slotd/slotd/lock"
)

// claimsInFlight bounds the claims ClaimMany keeps in flight: the client
// pipelines every request on the session's one connection, and the leader
// commits the writes that arrive together as one group.
const claimsInFlight = 128

// ClaimMany claims every request and calls f with each request's index and
// reply, one call at a time, on the caller's goroutine, as the replies
// come in (see lock.ClaimMany): up to claimsInFlight claims at once, each
// ending with ctx.
func (s *Store) ClaimMany(ctx context.Context, reqs []lock.ClaimRequest, f func(int, lock.ClaimReply)) {
	type reply struct {
		i int
		r lock.ClaimReply
	}
	replies := make(chan reply, claimsInFlight)
	sem := make(chan struct{}, claimsInFlight)
	go func() {
		for i, req := range reqs {
			sem <- struct{}{}
			go func() {
				defer func() { <-sem }()
				var r lock.ClaimReply
				r.Claim, r.Err = s.Claim(ctx, req.Slot, req.Owner, req.Policy)
				replies <- reply{i, r}
			}()
		}
	}()
	for range reqs {
		r := <-replies
		f(r.i, r.r)
	}
}

// ClaimsInFlight is how many claims one ClaimMany has in flight at most:
// the concurrency at which a raw baseline compares.
const ClaimsInFlight = claimsInFlight
