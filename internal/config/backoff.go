package config

import (
	"fmt"
	"time"
)

// RetryBackoff is a task's retry_backoff: after attempt n (1-based) of a
// slot failed, its next attempt starts no sooner than Initial·Multiplierⁿ⁻¹
// (at most Max) later, moved by up to Jitter of itself either way — on
// whichever replica claims it, since the release keeps the not-before time
// in the store. The zero value is no backoff: a peer retries at once.
type RetryBackoff struct {
	Initial    time.Duration // the first wait; > 0
	Multiplier float64       // growth per failed attempt; ≥ 1 (default 2)
	Max        time.Duration // the longest wait before jitter; ≥ Initial (default: the slot window)
	Jitter     float64       // in [0, 1] (default 0)
}

// Limits of retry_backoff's numbers.
const (
	DefaultBackoffMultiplier = 2
	MaxBackoffMultiplier     = 100
)

var retryBackoffKeys = []string{"initial", "multiplier", "max", "jitter"}

// readRetryBackoff reads the retry_backoff table of t (a task or
// [defaults]): every key checked on its own here; Max against the window
// in checkRetryBackoff.
func readRetryBackoff(t table) opt[RetryBackoff] {
	const key = "retry_backoff"
	v, ok := t.m[key]
	if !ok {
		return opt[RetryBackoff]{}
	}
	o := opt[RetryBackoff]{set: true, bad: true}
	m, isTable := v.(map[string]any)
	if !isTable {
		t.errorf(key, "must be a table such as { initial = \"10s\", multiplier = 2, max = \"5m\", jitter = 0.2 }, not %s", tomlType(v))
		return o
	}
	// Its keys are named "retry_backoff.initial" and so on, in the task's
	// scope.
	s := table{m: m, path: t.full(key).String(), p: t.p, scope: t.prefix() + t.key(key)}
	before := len(t.p.errs)
	s.checkKeys(retryBackoffKeys)
	b := RetryBackoff{Multiplier: DefaultBackoffMultiplier}
	switch init := s.duration("initial", positive); {
	case !init.set:
		s.errorf("initial", "required: the wait after a slot's first failed attempt, such as \"10s\"")
	case !init.bad:
		b.Initial = init.v
	}
	if mx := s.duration("max", positive); mx.set && !mx.bad {
		b.Max = mx.v
		if b.Initial > 0 && mx.v < b.Initial {
			s.errorf("max", "%v is shorter than initial %v", mx.v, b.Initial)
		}
	}
	if f, ok := s.number("multiplier"); ok {
		if f < 1 || f > MaxBackoffMultiplier {
			s.errorf("multiplier", "%v is out of range: want 1 to %d (1 waits initial every time)", f, MaxBackoffMultiplier)
		}
		b.Multiplier = f
	}
	if f, ok := s.number("jitter"); ok {
		if f < 0 || f > 1 {
			s.errorf("jitter", "%v is out of range: want 0 to 1 (the fraction of each wait it may move either way)", f)
		}
		b.Jitter = f
	}
	if len(t.p.errs) == before {
		o.v, o.bad = b, false
	}
	return o
}

// number reads an integer or a float at key; false if it is absent or not
// a number (reported).
func (t table) number(key string) (float64, bool) {
	v, ok := t.m[key]
	if !ok {
		return 0, false
	}
	switch n := v.(type) {
	case int64:
		return float64(n), true
	case float64:
		return n, true
	}
	t.errorf(key, "must be a number, not %s", tomlType(v))
	return 0, false
}

// checkRetryBackoff checks a task's retry_backoff o against its slot
// window (0: unknown) and fills in Max: a first wait as long as the window
// would leave no retry a chance to start.
func checkRetryBackoff(t table, o opt[RetryBackoff], window time.Duration) RetryBackoff {
	b := pick(o, RetryBackoff{})
	if b.Initial == 0 || window == 0 {
		return b
	}
	if b.Initial >= window {
		t.errorf("retry_backoff", "initial %v%s is not shorter than the slot window %v: no retry could start before the deadline; lower initial or raise deadline",
			b.Initial, o.where, window)
	}
	if b.Max == 0 {
		b.Max = window
	}
	return b
}

func (b RetryBackoff) String() string {
	return fmt.Sprintf("initial %v, multiplier %v, max %v, jitter %v", b.Initial, b.Multiplier, b.Max, b.Jitter)
}
