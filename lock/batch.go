package lock

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// errClosed: the store was closed; nothing more is sent.
var errClosed = errors.New("lock: store closed")

// batcher coalesces the script calls made concurrently on one store into
// pipelines, the way a database coalesces concurrent commits: a call that
// finds a pipeline slot free is sent at once, alone, so a quiet replica pays
// no added latency; calls that arrive while maxFlights round trips are in
// flight queue up and leave together, up to maxBatch per round trip. The
// claims of ten thousand slots due at the same instant, or the renewals of
// as many leases on one watchdog tick, thus cost tens of round trips, not
// ten thousand, with no timer and no tuning.
//
// Within a round trip the calls of one slot script are fused into one
// EVALSHA (see fuse.go), so a round trip carries at most one command per
// script. A round trip of one command is sent as a plain EVALSHA, not as a
// pipeline: go-redis serves pipelines from a pool of their own, which
// starts empty, so a lone claim sent as a pipeline would dial a new
// connection (and wait for its handshake) where the periodic clock check
// keeps one warm. A slow link
// then timed every claim out during the handshake, before it was sent.
//
// Claims queue behind every other call: a round trip takes the queued
// renewals, completions and releases first and fills up with claims. Those
// calls finish or keep work already won, where a claim starts more; in a
// burst, the claims of ten thousand slots queued first would otherwise hold
// up the completions of the slots won in the first round trips (and the
// goroutines waiting for them), and the renewals of every lease held.
//
// Each call keeps its own context: a call whose context ends while it
// queues is never sent (an abandoned claim must not win and then sit on the
// slot for a lease), and a caller stops waiting when its context ends. A
// round trip runs under the latest deadline among its calls; a call without
// a deadline counts as callLimit from when it is sent, so every round trip
// has a time limit.
type batcher struct {
	rdb        Client
	maxBatch   int
	maxFlights int
	fuse       bool // send the calls of one fusable script as one EVALSHA (not on a Cluster)

	mu      sync.Mutex
	queue   []*scriptCall // waiting calls other than claims: sent first
	claims  []*scriptCall // waiting claims
	flights int
	closed  bool // set by close; no flight starts after it
	wg      sync.WaitGroup
}

// scriptCall is one script invocation waiting for its round trip.
type scriptCall struct {
	ctx    context.Context
	script *redis.Script
	keys   []string
	args   []any
	cmd    *redis.Cmd    // set before done is closed
	done   chan struct{} // closed when cmd is set
}

// Pipelining limits: 256 scripts per round trip keeps one pipeline's reply
// small and Redis's event loop responsive for other clients; 4 round trips
// in flight keep one slow reply from serialising everything behind it.
// callLimit bounds a call whose caller set no deadline.
const (
	defaultMaxBatch   = 256
	defaultMaxFlights = 4
	callLimit         = 10 * time.Second
)

func newBatcher(rdb Client) *batcher {
	_, cluster := rdb.(clusterClient)
	return &batcher{rdb: rdb, maxBatch: defaultMaxBatch, maxFlights: defaultMaxFlights, fuse: !cluster}
}

// run runs s, pipelined with whatever other calls are waiting.
func (b *batcher) run(ctx context.Context, s *redis.Script, keys []string, args ...any) *redis.Cmd {
	if err := ctx.Err(); err != nil {
		return errCmd(ctx, err)
	}
	c := newCall(ctx, s, keys, args)
	b.enqueue(c)
	return c.wait()
}

func newCall(ctx context.Context, s *redis.Script, keys []string, args []any) *scriptCall {
	return &scriptCall{ctx: ctx, script: s, keys: keys, args: args, done: make(chan struct{})}
}

// wait returns c's reply once its round trip is back, or its context's
// error if that ends first.
func (c *scriptCall) wait() *redis.Cmd {
	select {
	case <-c.done:
		return c.cmd
	case <-c.ctx.Done():
		return errCmd(c.ctx, c.ctx.Err())
	}
}

// enqueue queues calls and starts the flights they need, up to maxFlights;
// after close it answers them errClosed.
func (b *batcher) enqueue(calls ...*scriptCall) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		for _, c := range calls {
			c.cmd = errCmd(c.ctx, errClosed)
			close(c.done)
		}
		return
	}
	for _, c := range calls {
		if c.script == claimScript {
			b.claims = append(b.claims, c)
		} else {
			b.queue = append(b.queue, c)
		}
	}
	waiting := len(b.queue) + len(b.claims)
	for started := 0; b.flights < b.maxFlights && started*b.maxBatch < waiting; started++ {
		b.flights++
		b.wg.Add(1) // under mu, never after close's Wait has begun
		go b.fly()
	}
}

func errCmd(ctx context.Context, err error) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(err)
	return cmd
}

// fly sends queued calls until the queue is empty. A call queued before
// close is still sent: close waits for it.
func (b *batcher) fly() {
	defer b.wg.Done()
	for {
		b.mu.Lock()
		n := min(len(b.queue), b.maxBatch)
		m := min(len(b.claims), b.maxBatch-n)
		if n+m == 0 {
			b.queue, b.claims = nil, nil // let the backing arrays go after a burst
			b.flights--
			b.mu.Unlock()
			return
		}
		batch := append(b.queue[:n:n], b.claims[:m]...)
		b.queue, b.claims = b.queue[n:], b.claims[m:]
		b.mu.Unlock()
		b.exec(batch)
	}
}

// exec sends batch in one round trip: one EVALSHA alone, or a pipeline of
// one per script (fused) or per call (not fusable, or on a Cluster).
// Calls whose context has ended are answered with its error and not sent.
func (b *batcher) exec(batch []*scriptCall) {
	live := batch[:0:0]
	var deadline time.Time
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			c.cmd = errCmd(c.ctx, err)
			close(c.done)
			continue
		}
		live = append(live, c)
		d, ok := c.ctx.Deadline()
		if !ok {
			d = time.Now().Add(callLimit)
		}
		if d.After(deadline) {
			deadline = d
		}
	}
	sends := b.group(live)
	switch len(sends) {
	case 0:
		return
	case 1:
		s := sends[0]
		parent := context.Background() // a fused call serves callers other than the first
		if len(s.calls) == 1 {
			parent = s.calls[0].ctx
		}
		ctx, cancel := context.WithDeadline(parent, deadline)
		defer cancel()
		s.answer(s.script.Run(ctx, b.rdb, s.keys, s.args...)) // EVALSHA; EVAL after NOSCRIPT
		return
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	cmds := b.pipeline(ctx, sends)
	if again := noScript(cmds); len(again) > 0 {
		// Redis lost its script cache (a restart, a failover, SCRIPT FLUSH):
		// load each missing script once, then resend those calls by hash,
		// rather than sending every call's full source as EVAL.
		resend := make([]*send, len(again))
		loaded := map[*redis.Script]bool{}
		for j, i := range again {
			resend[j] = sends[i]
			if s := sends[i].script; !loaded[s] {
				loaded[s] = true
				_ = s.Load(ctx, b.rdb).Err() // a failure shows as NOSCRIPT again
			}
		}
		for j, cmd := range b.pipeline(ctx, resend) {
			cmds[again[j]] = cmd
		}
	}
	for i, s := range sends {
		s.answer(cmds[i])
	}
}

// pipeline sends each of sends as one EVALSHA, all in one pipeline, and
// returns their commands, each with its own reply or error.
func (b *batcher) pipeline(ctx context.Context, sends []*send) []*redis.Cmd {
	p := b.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(sends))
	for i, s := range sends {
		cmds[i] = s.script.EvalSha(ctx, p, s.keys, s.args...)
	}
	_, _ = p.Exec(ctx) // each command carries its own error
	return cmds
}

// noScript returns the indexes of the commands Redis answered NOSCRIPT.
func noScript(cmds []*redis.Cmd) []int {
	var out []int
	for i, cmd := range cmds {
		if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			out = append(out, i)
		}
	}
	return out
}

// close stops new calls (they fail with errClosed) and waits for the round
// trips in flight and the calls queued before it.
func (b *batcher) close() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.wg.Wait()
}
