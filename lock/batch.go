package lock

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// batcher coalesces the script calls made concurrently on one store into
// pipelines, the way a database coalesces concurrent commits: a call that
// finds a pipeline slot free is sent at once, alone, so a quiet replica pays
// no added latency; calls that arrive while maxFlights pipelines are in
// flight queue up and leave together, up to maxBatch per round trip. The
// claims of ten thousand slots due at the same instant, or the renewals of
// as many leases on one watchdog tick, thus cost tens of round trips, not
// ten thousand, with no timer and no tuning.
//
// Each call keeps its own context: a call whose context ends while it
// queues is never sent (an abandoned claim must not win and then sit on the
// slot for a lease), and a caller stops waiting when its context ends. A
// pipeline runs under the latest deadline among its calls.
type batcher struct {
	rdb        Client
	maxBatch   int
	maxFlights int

	mu      sync.Mutex
	queue   []*scriptCall
	flights int
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
// small and Redis's event loop responsive for other clients; 4 pipelines in
// flight keep a round trip's wait from serialising everything behind it.
const (
	defaultMaxBatch   = 256
	defaultMaxFlights = 4
)

func newBatcher(rdb Client) *batcher {
	return &batcher{rdb: rdb, maxBatch: defaultMaxBatch, maxFlights: defaultMaxFlights}
}

// run runs s, pipelined with whatever other calls are waiting.
func (b *batcher) run(ctx context.Context, s *redis.Script, keys []string, args ...any) *redis.Cmd {
	if err := ctx.Err(); err != nil {
		return errCmd(ctx, err)
	}
	c := &scriptCall{ctx: ctx, script: s, keys: keys, args: args, done: make(chan struct{})}
	b.mu.Lock()
	b.queue = append(b.queue, c)
	if b.flights < b.maxFlights {
		b.flights++
		b.wg.Add(1)
		go b.fly()
	}
	b.mu.Unlock()
	select {
	case <-c.done:
		return c.cmd
	case <-ctx.Done():
		return errCmd(ctx, ctx.Err())
	}
}

func errCmd(ctx context.Context, err error) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(err)
	return cmd
}

// fly sends queued calls until the queue is empty.
func (b *batcher) fly() {
	defer b.wg.Done()
	for {
		b.mu.Lock()
		n := min(len(b.queue), b.maxBatch)
		if n == 0 {
			b.queue = nil // let the backing array go after a burst
			b.flights--
			b.mu.Unlock()
			return
		}
		batch := b.queue[:n:n]
		b.queue = b.queue[n:]
		b.mu.Unlock()
		b.exec(batch)
	}
}

// exec sends batch in one pipeline (two if Redis lacks a script: after a
// restart or SCRIPT FLUSH, the calls answered NOSCRIPT are resent as EVAL).
func (b *batcher) exec(batch []*scriptCall) {
	live := batch[:0:0]
	var deadline time.Time
	unbounded := false
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			c.cmd = errCmd(c.ctx, err)
			close(c.done)
			continue
		}
		live = append(live, c)
		if d, ok := c.ctx.Deadline(); !ok {
			unbounded = true
		} else if d.After(deadline) {
			deadline = d
		}
	}
	if len(live) == 0 {
		return
	}
	ctx := context.Background()
	if !unbounded {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	cmds := make([]*redis.Cmd, len(live))
	p := b.rdb.Pipeline()
	for i, c := range live {
		cmds[i] = c.script.EvalSha(ctx, p, c.keys, c.args...)
	}
	_, _ = p.Exec(ctx) // each command carries its own error
	var again []int
	for i, cmd := range cmds {
		if err := cmd.Err(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		p := b.rdb.Pipeline()
		for _, i := range again {
			c := live[i]
			cmds[i] = c.script.Eval(ctx, p, c.keys, c.args...)
		}
		_, _ = p.Exec(ctx)
	}
	for i, c := range live {
		c.cmd = cmds[i]
		close(c.done)
	}
}

// wait waits for the pipelines in flight to end.
func (b *batcher) wait() { b.wg.Wait() }
