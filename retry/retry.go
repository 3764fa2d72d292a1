// Package retry computes waits between attempts: exponential growth from Min
// to Max, with full jitter by default so that replicas that failed together
// do not retry together. It is the one place slotd's backoffs are written;
// it does no I/O and keeps no state.
package retry

import (
	"math"
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
	// Factor is how much the ceiling grows per retry; 0 means 2. A factor
	// below 1 is taken as 1.
	Factor float64
	// Spread is Around's jitter: its wait varies by up to this fraction of
	// the ceiling, either way (0.2: ±20%).
	Spread float64
}

// Ceil is the ceiling of the wait before retry n (0 for the first retry):
// min(Max, Min·Factorⁿ), and never below Min.
func (b Backoff) Ceil(n int) time.Duration {
	if b.Min <= 0 {
		return 0
	}
	f := b.Factor
	if f == 0 {
		f = 2
	}
	f = max(f, 1)
	c := float64(b.Min)
	for range max(n, 0) {
		if c >= float64(b.Max) {
			break
		}
		c *= f
	}
	if c >= float64(b.Max) {
		return max(b.Max, b.Min)
	}
	return time.Duration(c)
}

// Delay returns the wait before retry n (0 for the first retry): a uniformly
// random duration in [Min, Ceil(n)], or that ceiling itself with
// NoJitter. A Max below Min waits Min.
func (b Backoff) Delay(n int) time.Duration {
	ceil := b.Ceil(n)
	if ceil <= b.Min || b.NoJitter {
		return ceil
	}
	return b.Min + rand.N(ceil-b.Min+1)
}

// Around returns the wait before retry n as Ceil(n) moved by Spread of
// itself, either way, to the point u of that range (u in [0, 1): 0 is the
// shortest, 0.5 the ceiling itself), and never past Max. The caller picks
// u — a hash of what every contender shares makes the wait the same for
// all of them, and reproducible.
func (b Backoff) Around(n int, u float64) time.Duration {
	c := b.Ceil(n)
	s := min(max(b.Spread, 0), 1)
	if c <= 0 || s == 0 {
		return c
	}
	u = min(max(u, 0), 1)
	d := time.Duration(math.Round(float64(c) * (1 + s*(2*u-1))))
	if b.Max > 0 && d > max(b.Max, b.Min) {
		d = max(b.Max, b.Min)
	}
	return max(d, 0)
}

// Jitter returns a uniformly random wait in [Min, Max] that does not grow
// with the retries: for contenders that must be spread apart but have no
// reason to back off further (Redlock's retry after a split vote). A Max
// below Min waits Min; NoJitter waits Max.
func (b Backoff) Jitter() time.Duration { return b.Delay(62) }
