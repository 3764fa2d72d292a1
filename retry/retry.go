// Package retry computes waits between attempts: exponential growth from Min
// to Max with full jitter, so that replicas that failed together do not
// retry together.
package retry

import (
	"math/rand/v2"
	"time"
)

// Backoff is a policy of waits. The zero value waits nothing.
type Backoff struct {
	Min time.Duration // the first wait's ceiling, and every wait's floor
	Max time.Duration // the ceiling no wait exceeds
}

// Delay returns the wait before retry n (0 for the first retry): a uniformly
// random duration in [Min, min(Max, Min·2ⁿ)].
func (b Backoff) Delay(n int) time.Duration {
	if b.Min <= 0 {
		return 0
	}
	ceil := b.Max
	if n < 62 && b.Min<<n > 0 && b.Min<<n < b.Max {
		ceil = b.Min << n
	}
	if ceil <= b.Min {
		return b.Min
	}
	return b.Min + rand.N(ceil-b.Min+1)
}
