package lock

import (
	"context"
	"sync"
	"sync/atomic"
)

// Burst gathers the claims of n goroutines that start together — the slots
// of one fire time — so that the Redis store sends them together: held until
// every member has claimed or skipped, then queued at once, they leave in
// ceil(n/256) pipelines however the goroutines were scheduled. Without it
// the first claims to arrive would go out in small round trips while the
// rest were still being started.
//
// Each member calls Claim once with a context from Join, or Skip if it
// will not claim. A claim held waiting for the others still ends with its
// own context. Stores other than Redis, and Redis under WithMinReplicasAck,
// hold nothing. A nil *Burst is valid and gathers nothing.
type Burst struct {
	mu   sync.Mutex
	left int
	held []*scriptCall
	to   *batcher
}

// NewBurst returns a burst of n members.
func NewBurst(n int) *Burst { return &Burst{left: n} }

// burstKey carries a member's place in a burst in a context.
type burstKey struct{}

type burstTicket struct {
	b    *Burst
	used atomic.Bool
}

// Join returns ctx marked for the member's claim. Only the first store
// call made with it (or a context derived from it) joins the burst.
func (b *Burst) Join(ctx context.Context) context.Context {
	if b == nil {
		return ctx
	}
	return context.WithValue(ctx, burstKey{}, &burstTicket{b: b})
}

// Skip counts a member that will not claim.
func (b *Burst) Skip() {
	if b != nil {
		b.arrive(nil, nil)
	}
}

// burstOf returns the burst ctx's claim belongs to, once; nil otherwise.
func burstOf(ctx context.Context) *Burst {
	t, _ := ctx.Value(burstKey{}).(*burstTicket)
	if t == nil || t.used.Swap(true) {
		return nil
	}
	return t.b
}

// arrive counts one member, holding its call c (nil: none) for batcher to;
// the last member to arrive queues every held call at once.
func (b *Burst) arrive(to *batcher, c *scriptCall) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if c != nil {
		b.held, b.to = append(b.held, c), to
	}
	if b.left--; b.left == 0 && len(b.held) > 0 {
		b.to.enqueue(b.held...)
		b.held = nil
	}
}
