// Package coalesce batches requests made concurrently into round trips, the
// way a database coalesces concurrent commits: a request that finds a round
// trip free leaves at once, alone, so a quiet caller pays no added latency;
// requests that arrive while MaxFlights round trips are in flight queue up
// and leave together, up to MaxBatch per round trip. A burst of ten
// thousand requests thus costs tens of round trips, with no timer and no
// tuning.
//
// Guarantees: every request is answered exactly once (by Send, by the end
// of its context, or with ErrClosed); a request whose context has ended
// before its round trip is never sent; a round trip carries a time limit
// (the latest deadline among its requests); no round trip starts after
// Close returns, and Close waits for the requests queued before it. What a
// round trip is, and how its requests share it (a pipeline, a transaction,
// one fused command), is the caller's Send.
package coalesce

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrClosed answers a request made after Close.
var ErrClosed = errors.New("coalesce: closed")

// Defaults of Config.
const (
	DefaultMaxBatch   = 256
	DefaultMaxFlights = 1
	DefaultLimit      = 10 * time.Second
)

// Config is what a Coalescer needs: the round trip, and its limits.
type Config[Req, Resp any] struct {
	// Send makes one round trip for batch and sets each call's Resp or Err.
	// Every call's context was live when the batch was taken. ctx carries
	// the round trip's time limit; when batch has one call, ctx derives
	// from that call's context (a round trip that serves one caller ends
	// with it; one that serves several ends only at its limit). Send runs on
	// a goroutine of the Coalescer's, at most MaxFlights at once.
	Send func(ctx context.Context, batch []*Call[Req, Resp])
	// MaxBatch bounds the calls of one round trip (default DefaultMaxBatch).
	MaxBatch int
	// MaxFlights bounds the round trips in flight at once (default
	// DefaultMaxFlights). More than one keeps one slow reply from
	// serialising everything queued behind it.
	MaxFlights int
	// Limit is the time limit, counted from when its round trip leaves, of
	// a call whose context has no deadline (default DefaultLimit).
	Limit time.Duration
	// Later, if set, marks requests that leave only after every queued
	// request it does not mark: a round trip takes the others first and
	// fills up with these (lock: claims queue behind renewals, completions
	// and releases, which finish work already won).
	Later func(Req) bool
}

// Call is one request waiting for its round trip, and its answer.
type Call[Req, Resp any] struct {
	Ctx  context.Context // the caller's; the call is not sent once it ends
	Req  Req
	Resp Resp  // set by Send
	Err  error // set by Send, or the context's error, or ErrClosed
	done chan struct{}
}

// Wait returns the call's answer once its round trip is back, or its
// context's error if that ends first.
func (c *Call[Req, Resp]) Wait() (Resp, error) {
	select {
	case <-c.done:
		return c.Resp, c.Err
	case <-c.Ctx.Done():
		var zero Resp
		return zero, c.Ctx.Err()
	}
}

// Coalescer queues requests and sends them in batches. It is safe for
// concurrent use; Close ends it.
type Coalescer[Req, Resp any] struct {
	cfg Config[Req, Resp]

	mu      sync.Mutex
	queue   []*Call[Req, Resp] // waiting calls not marked Later: sent first
	later   []*Call[Req, Resp] // waiting calls marked Later
	flights int
	closed  bool // set by Close; no flight starts after it
	wg      sync.WaitGroup
}

// New returns a Coalescer for cfg, whose Send must be set. It starts no
// goroutine until a request comes.
func New[Req, Resp any](cfg Config[Req, Resp]) *Coalescer[Req, Resp] {
	if cfg.Send == nil {
		panic("coalesce: nil Send")
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = DefaultMaxBatch
	}
	if cfg.MaxFlights <= 0 {
		cfg.MaxFlights = DefaultMaxFlights
	}
	if cfg.Limit <= 0 {
		cfg.Limit = DefaultLimit
	}
	return &Coalescer[Req, Resp]{cfg: cfg}
}

// Do sends req, batched with whatever other requests are waiting, and
// returns its answer; ctx's error if ctx ends first (the request is then
// not sent, unless its round trip has left); ErrClosed after Close.
func (c *Coalescer[Req, Resp]) Do(ctx context.Context, req Req) (Resp, error) {
	if err := ctx.Err(); err != nil {
		var zero Resp
		return zero, err
	}
	call := newCall[Req, Resp](ctx, req)
	c.enqueue(call)
	return call.Wait()
}

// Queue queues every one of reqs at once, so that they leave in as few
// round trips as the limits allow, and returns their calls to Wait on.
func (c *Coalescer[Req, Resp]) Queue(ctx context.Context, reqs ...Req) []*Call[Req, Resp] {
	calls := make([]*Call[Req, Resp], len(reqs))
	for i, r := range reqs {
		calls[i] = newCall[Req, Resp](ctx, r)
	}
	c.enqueue(calls...)
	return calls
}

func newCall[Req, Resp any](ctx context.Context, req Req) *Call[Req, Resp] {
	return &Call[Req, Resp]{Ctx: ctx, Req: req, done: make(chan struct{})}
}

// Pending reports the calls waiting for a round trip and the round trips in
// flight.
func (c *Coalescer[Req, Resp]) Pending() (queued, flights int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queue) + len(c.later), c.flights
}

// enqueue queues calls and starts the flights they need, up to MaxFlights;
// after Close it answers them ErrClosed.
func (c *Coalescer[Req, Resp]) enqueue(calls ...*Call[Req, Resp]) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		for _, call := range calls {
			call.Err = ErrClosed
			close(call.done)
		}
		return
	}
	for _, call := range calls {
		if c.cfg.Later != nil && c.cfg.Later(call.Req) {
			c.later = append(c.later, call)
		} else {
			c.queue = append(c.queue, call)
		}
	}
	waiting := len(c.queue) + len(c.later)
	for started := 0; c.flights < c.cfg.MaxFlights && started*c.cfg.MaxBatch < waiting; started++ {
		c.flights++
		c.wg.Add(1) // under mu, never after Close's Wait has begun
		go c.fly()
	}
}

// fly sends queued calls until the queue is empty. A call queued before
// Close is still sent: Close waits for it.
func (c *Coalescer[Req, Resp]) fly() {
	defer c.wg.Done()
	for {
		c.mu.Lock()
		n := min(len(c.queue), c.cfg.MaxBatch)
		m := min(len(c.later), c.cfg.MaxBatch-n)
		if n+m == 0 {
			c.queue, c.later = nil, nil // let the backing arrays go after a burst
			c.flights--
			c.mu.Unlock()
			return
		}
		batch := append(c.queue[:n:n], c.later[:m]...)
		c.queue, c.later = c.queue[n:], c.later[m:]
		c.mu.Unlock()
		c.exec(batch)
	}
}

// exec sends the live calls of batch in one round trip, under the latest
// deadline among them, and answers the others with their context's error.
func (c *Coalescer[Req, Resp]) exec(batch []*Call[Req, Resp]) {
	live := batch[:0:0]
	var deadline time.Time
	for _, call := range batch {
		if err := call.Ctx.Err(); err != nil {
			call.Err = err
			close(call.done)
			continue
		}
		live = append(live, call)
		d, ok := call.Ctx.Deadline()
		if !ok {
			d = time.Now().Add(c.cfg.Limit)
		}
		if d.After(deadline) {
			deadline = d
		}
	}
	if len(live) == 0 {
		return
	}
	parent := context.Background()
	if len(live) == 1 {
		parent = live[0].Ctx
	}
	ctx, cancel := context.WithDeadline(parent, deadline)
	defer cancel()
	c.cfg.Send(ctx, live)
	for _, call := range live {
		close(call.done)
	}
}

// Close stops new requests (they fail with ErrClosed) and waits for the
// round trips in flight and the requests queued before it.
func (c *Coalescer[Req, Resp]) Close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.wg.Wait()
}
