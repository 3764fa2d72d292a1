// Package quorum is the Redlock arithmetic and the fan-out to every node
// that the Redlock store (package redislock) and the Redlock mutex
// (package mutex) share.
package quorum

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Of is the number of agreeing nodes a Redlock decision needs out of n:
// a strict majority, so two quorums always share a node.
func Of(n int) int { return n/2 + 1 }

// Drift is the clock-Drift allowance for a lease: 1% of it plus 2ms, as in
// the Redlock algorithm, covering rate differences between the nodes' clocks
// and the caller's.
func Drift(lease time.Duration) time.Duration {
	return lease/100 + 2*time.Millisecond
}

// Validity is how long a lock won on a quorum is still safe to hold after a
// round that took elapsed: lease − elapsed − Drift. A result ≤ 0 means the
// round took too long and the lock must be treated as not won (and released).
func Validity(lease, elapsed time.Duration) time.Duration {
	return lease - elapsed - Drift(lease)
}

// Result is one node's answer to a fan-out: its value or its error.
type Result[T any] struct {
	Val T
	Err error
}

// FanOut runs op on every node in parallel, each call bounded by its own
// context with the per-node timeout (timeout ≤ 0: only ctx bounds it), and
// returns the results in node order. It waits for every call: no goroutine
// outlives it, and a slow node costs at most the timeout.
func FanOut[N, T any](ctx context.Context, nodes []N, timeout time.Duration, op func(context.Context, N) (T, error)) []Result[T] {
	res := make([]Result[T], len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Add(1)
		go func(i int, n N) {
			defer wg.Done()
			c, cancel := ctx, context.CancelFunc(func() {})
			if timeout > 0 {
				c, cancel = context.WithTimeout(ctx, timeout)
			}
			defer cancel()
			v, err := op(c, n)
			res[i] = Result[T]{Val: v, Err: err}
		}(i, n)
	}
	wg.Wait()
	return res
}

// FanOutUntil is FanOut for reads that a quorum of answers settles: as
// soon as enough(results so far, answered so far) holds, the calls still
// running are cancelled, and what they return is dropped (their results
// read as never answered: a zero Val and Err errNotAsked). It still waits
// for every call, so no goroutine outlives it; a cancelled call returns at
// once. A dead or stalled node then costs a read nothing once the others
// have answered.
func FanOutUntil[N, T any](ctx context.Context, nodes []N, timeout time.Duration, op func(context.Context, N) (T, error),
	enough func(res []Result[T], answered []bool) bool) []Result[T] {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type answer struct {
		i int
		r Result[T]
	}
	ch := make(chan answer, len(nodes))
	for i, n := range nodes {
		go func() {
			c, stop := context.WithTimeout(ctx, timeout)
			defer stop()
			v, err := op(c, n)
			ch <- answer{i, Result[T]{Val: v, Err: err}}
		}()
	}
	res := make([]Result[T], len(nodes))
	answered := make([]bool, len(nodes))
	for i := range res {
		res[i].Err = errNotAsked
	}
	settled := false
	for range nodes {
		a := <-ch
		if settled {
			continue
		}
		res[a.i], answered[a.i] = a.r, true
		if enough(res, answered) {
			settled = true
			cancel()
		}
	}
	return res
}

// errNotAsked stands for the answer of a node that FanOutUntil stopped
// waiting for.
var errNotAsked = errors.New("lock: not waited for: a quorum had answered")
