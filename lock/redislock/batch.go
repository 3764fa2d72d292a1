package redislock

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/internal/coalesce"
)

// errClosed: the store was closed; nothing more is sent.
var errClosed = errors.New("lock: store closed")

// batcher coalesces the script calls made concurrently on one store into
// pipelines (see internal/coalesce, which queues and flies them): a call
// that finds a pipeline slot free is sent at once, alone, so a quiet
// replica pays no added latency; calls that arrive while maxFlights round
// trips are in flight queue up and leave together, up to maxBatch per
// round trip. The claims of ten thousand slots due at the same instant, or
// the renewals of as many leases on one watchdog tick, thus cost tens of
// round trips, not ten thousand, with no timer and no tuning.
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
	rdb  Client
	fuse bool // send the calls of one fusable script as one EVALSHA (not on a Cluster)
	co   *coalesce.Coalescer[scriptReq, *redis.Cmd]
}

// scriptReq is one script invocation.
type scriptReq struct {
	script *redis.Script
	keys   []string
	args   []any
}

// scriptCall is one script invocation waiting for its round trip; its
// Resp is the script's reply.
type scriptCall = coalesce.Call[scriptReq, *redis.Cmd]

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
	b := &batcher{rdb: rdb, fuse: !cluster}
	b.co = coalesce.New(coalesce.Config[scriptReq, *redis.Cmd]{
		Send:       b.exec,
		MaxBatch:   defaultMaxBatch,
		MaxFlights: defaultMaxFlights,
		Limit:      callLimit,
		Later:      func(r scriptReq) bool { return r.script == claimScript },
	})
	return b
}

// run runs s, pipelined with whatever other calls are waiting.
func (b *batcher) run(ctx context.Context, s *redis.Script, keys []string, args ...any) *redis.Cmd {
	cmd, err := b.co.Do(ctx, scriptReq{script: s, keys: keys, args: args})
	if err != nil {
		return errCmd(ctx, err)
	}
	return cmd
}

// queue queues the calls of reqs at once; wait reads each one's reply.
func (b *batcher) queue(ctx context.Context, reqs ...scriptReq) []*scriptCall {
	return b.co.Queue(ctx, reqs...)
}

// wait returns c's reply once its round trip is back, or its context's
// error if that ends first.
func wait(c *scriptCall) *redis.Cmd {
	cmd, err := c.Wait()
	if err != nil {
		return errCmd(c.Ctx, err)
	}
	return cmd
}

// errCmd is a reply carrying err; the coalescer's ErrClosed reads as
// errClosed.
func errCmd(ctx context.Context, err error) *redis.Cmd {
	if errors.Is(err, coalesce.ErrClosed) {
		err = errClosed
	}
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(err)
	return cmd
}

// exec sends batch in one round trip under ctx: one EVALSHA alone, or a
// pipeline of one per script (fused) or per call (not fusable, or on a
// Cluster). The coalescer has answered the calls whose context had ended;
// exec sets the reply of every other.
func (b *batcher) exec(ctx context.Context, batch []*scriptCall) {
	sends := b.group(batch)
	switch len(sends) {
	case 0:
		return
	case 1:
		// ctx ends with the caller only if the batch is that caller's alone.
		s := sends[0]
		s.answer(s.script.Run(ctx, b.rdb, s.keys, s.args...)) // EVALSHA; EVAL after NOSCRIPT
		return
	}
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
func (b *batcher) close() { b.co.Close() }
