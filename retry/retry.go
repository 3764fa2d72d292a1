// Package retry computes waits between attempts: exponential growth from Min
// to Max, with full jitter by default so that replicas that failed together
// do not retry together. It is the one place slotd's backoffs are written;
// it does no I/O and keeps no state.
package retry

import (
	"math/rand/v2"
	"time"
)

// Backoff is a policy of waits. The zero value waits nothing.
type Backoff struct {
	Min time.Duration // the first wait's ceiling, and every wait's floor
	Max time.Duration // the ceiling no wait exceeds
	// NoJitter makes each wait its ceiling exactly: for a caller retrying
	// its own request, which collides with nobody's (a lease holder
	// retrying the completion of its own slot).
	NoJitter bool
}

// Delay returns the wait before retry n (0 for the first retry): a uniformly
// random duration in [Min, min(Max, Min·2ⁿ)], or that ceiling itself with
// NoJitter. A Max below Min waits Min.
func (b Backoff) Delay(n int) time.Duration {
	if b.Min <= 0 {
		return 0
	}
	ceil := b.Max
	n = max(n, 0)
	if n < 62 && b.Min<<n > 0 && b.Min<<n < b.Max {
		ceil = b.Min << n
	}
	if ceil <= b.Min {
		return b.Min
	}
	if b.NoJitter {
		return ceil
	}
	return b.Min + rand.N(ceil-b.Min+1)
}

// Jitter returns a uniformly random wait in [Min, Max] that does not grow
// with the retries: for contenders that must be spread apart but have no
// reason to back off further (Redlock's retry after a split vote). A Max
// below Min waits Min; NoJitter waits Max.
func (b Backoff) Jitter() time.Duration { return b.Delay(62) }
