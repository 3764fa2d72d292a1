package lock

import (
	"context"
	"sync"
	"time"
)

// Redlock arithmetic and the fan-out that the Redlock store and the Redlock
// mutex share. Kept unexported and small on purpose: its callers merge it.

// quorum is the number of agreeing nodes a Redlock decision needs out of n:
// a strict majority, so two quorums always share a node.
func quorum(n int) int { return n/2 + 1 }

// drift is the clock-drift allowance for a lease: 1% of it plus 2ms, as in
// the Redlock algorithm, covering rate differences between the nodes' clocks
// and the caller's.
func drift(lease time.Duration) time.Duration {
	return lease/100 + 2*time.Millisecond
}

// validity is how long a lock won on a quorum is still safe to hold after a
// round that took elapsed: lease − elapsed − drift. A result ≤ 0 means the
// round took too long and the lock must be treated as not won (and released).
func validity(lease, elapsed time.Duration) time.Duration {
	return lease - elapsed - drift(lease)
}

// nodeResult is one node's answer to a fan-out: its value or its error.
type nodeResult[T any] struct {
	Val T
	Err error
}

// fanOut runs op on every node in parallel, each call bounded by its own
// context with the per-node timeout (timeout ≤ 0: only ctx bounds it), and
// returns the results in node order. It waits for every call: no goroutine
// outlives it, and a slow node costs at most the timeout.
func fanOut[N, T any](ctx context.Context, nodes []N, timeout time.Duration, op func(context.Context, N) (T, error)) []nodeResult[T] {
	res := make([]nodeResult[T], len(nodes))
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
			res[i] = nodeResult[T]{Val: v, Err: err}
		}(i, n)
	}
	wg.Wait()
	return res
}
