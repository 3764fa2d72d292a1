package redislock

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Fusing. Redis spends a few microseconds on every script call before the
// script does anything, several times what one GET or SET costs, so a
// pipeline of 256 one-slot claims is bounded by that fixed cost, not by
// the work. The slot scripts therefore take N slots in one call (their
// keys and arguments are N one-slot calls laid end to end) and answer an
// array with one reply per slot, and the batcher sends the concurrent calls
// of one such script as one EVALSHA. Each slot carries all its own
// arguments, so calls of different callers, even of different replicas'
// stores on one client, fuse alike. A slot's own trouble (a key of the
// wrong type) is an error reply for that slot alone; only an error of the
// whole call (the connection, NOSCRIPT) is every slot's.
//
// On a Redis Cluster nothing is fused: the keys of different slots hash to
// different shards, which one script call cannot touch (CROSSSLOT), so
// each call stays one EVALSHA of one slot.

// arity is how many keys and arguments one slot adds to a fused call.
type arity struct{ keys, args int }

// fusable lists the scripts that take N slots in one call.
var fusable = map[*redis.Script]arity{
	claimScript:          {keys: 3, args: 4},
	renewScript:          {keys: 1, args: 2},
	completeScript:       {keys: 2, args: 2},
	completeRecordScript: {keys: 2, args: 2 + len(entryNames)},
	releaseScript:        {keys: 1, args: 3},
}

// send is one EVALSHA of a round trip: one call, or the calls of one
// fusable script fused into it.
type send struct {
	script *redis.Script
	calls  []*scriptCall
	keys   []string
	args   []any
	// perSlot: the script answers an array with one reply per call (every
	// fusable script does, also for a call sent alone).
	perSlot bool
}

// group turns the live calls of a batch into sends: all the calls of one
// fusable script become one send (unless fusing is off), in the order of
// each script's first call; any other call is a send of its own. A call
// whose keys or arguments do not fit its script's arity is answered with
// an error and not sent, since in a fused call it would shift its
// neighbours' arguments.
func (b *batcher) group(live []*scriptCall) []*send {
	var out []*send
	for _, c := range live {
		a, ok := fusable[c.Req.script]
		if ok && (len(c.Req.keys) != a.keys || len(c.Req.args) != a.args) {
			c.Resp = errCmd(c.Ctx, fmt.Errorf("lock: script call with %d keys and %d arguments, want %d and %d",
				len(c.Req.keys), len(c.Req.args), a.keys, a.args))
			continue
		}
		if ok && b.fuse {
			if s := sendOf(out, c.Req.script); s != nil {
				if len(s.calls) == 1 { // fusing starts: room for the whole batch, not the caller's slices
					s.keys = append(make([]string, 0, len(live)*a.keys), s.keys...)
					s.args = append(make([]any, 0, len(live)*a.args), s.args...)
				}
				s.calls = append(s.calls, c)
				s.keys = append(s.keys, c.Req.keys...)
				s.args = append(s.args, c.Req.args...)
				continue
			}
		}
		out = append(out, &send{script: c.Req.script, calls: []*scriptCall{c}, keys: c.Req.keys, args: c.Req.args, perSlot: ok})
	}
	return out
}

// sendOf returns the send of script s among sends, or nil. A batch holds
// at most a few scripts, so a scan beats a map.
func sendOf(sends []*send, s *redis.Script) *send {
	for _, x := range sends {
		if x.script == s {
			return x
		}
	}
	return nil
}

// answer gives each call of s its reply from cmd and wakes it.
func (s *send) answer(cmd *redis.Cmd) {
	if !s.perSlot {
		s.calls[0].Resp = cmd
		return
	}
	for i, one := range splitReply(cmd, len(s.calls)) {
		s.calls[i].Resp = one
	}
}

// splitReply splits the reply of a fused script call of n slots into n
// commands, each with its slot's reply, or its slot's error reply, or the
// error of the whole call.
func splitReply(cmd *redis.Cmd, n int) []*redis.Cmd {
	replies, err := cmd.Slice()
	if err == nil && len(replies) != n {
		err = fmt.Errorf("lock: %d replies to a script call of %d slots", len(replies), n)
	}
	out := make([]*redis.Cmd, n)
	for i := range out {
		one := redis.NewCmd(context.Background())
		switch {
		case err != nil:
			one.SetErr(err)
		default:
			if e, ok := replies[i].(error); ok { // go-redis keeps an element's error reply as a value
				one.SetErr(e)
			} else {
				one.SetVal(replies[i])
			}
		}
		out[i] = one
	}
	return out
}

// runOne runs a fusable script for one slot on c, outside the batcher (on a
// pinned connection), and returns that slot's reply.
func runOne(ctx context.Context, c redis.Scripter, s *redis.Script, keys []string, args ...any) *redis.Cmd {
	return splitReply(s.Run(ctx, c, keys, args...), 1)[0]
}
