package config

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/slotd/slotd/scheduler/schedule"
)

// rawPolicy is a policy table as written: each key unset, valid, or invalid
// (already reported), so that a task inherits [defaults] key by key and a
// bad default is reported once, not once per task.
type rawPolicy struct {
	lease, doneTTL, timeout, deadline opt[time.Duration]
	catchupLimit                      opt[time.Duration]
	maxAttempts, outputTail           opt[int]
	catchup                           opt[Catchup]
	concurrency                       opt[Concurrency]
	retryBackoff                      opt[RetryBackoff]
}

type opt[T any] struct {
	v        T
	set, bad bool
	where    string // " (from [defaults])" when inherited
}

func (o opt[T]) or(def opt[T]) opt[T] {
	if o.set {
		return o
	}
	if def.set {
		def.where = " (from [defaults])"
	}
	return def
}

func readPolicy(t table) rawPolicy {
	var rp rawPolicy
	rp.lease = t.duration("lease", func(d time.Duration) string {
		if d < MinLease {
			return fmt.Sprintf("%v is shorter than %v: the lease is renewed every lease/3 and could not be renewed reliably", d, MinLease)
		}
		return ""
	})
	rp.doneTTL = t.duration("done_ttl", positive)
	rp.timeout = t.duration("timeout", positive)
	rp.deadline = t.duration("deadline", func(d time.Duration) string {
		if d > 0 && d < MinDeadline {
			return fmt.Sprintf("%v is shorter than %v: slot times are whole seconds, and a slot's window must leave time for a claim to reach Redis", d, MinDeadline)
		}
		return positive(d)
	})
	rp.catchupLimit = t.duration("catchup_limit", positive)
	rp.maxAttempts = t.integer("max_attempts", 1, MaxAttemptsLimit,
		"the fencing token is slot_unix_seconds*1000 + attempt")
	rp.outputTail = t.integer("output_tail", 0, MaxOutputTail,
		"bytes of each attempt's output its history entry keeps; 0 keeps none")
	rp.catchup = choice(t, "catchup", CatchupLatest, CatchupNone)
	rp.concurrency = choice(t, "concurrency", ConcurrencyAllow, ConcurrencyForbid, ConcurrencyReplace, ConcurrencyQueue)
	rp.retryBackoff = readRetryBackoff(t)
	return rp
}

// choice reads the string at key, which must name one of want.
func choice[E fmt.Stringer](t table, key string, want ...E) opt[E] {
	var o opt[E]
	v, ok := t.str(key)
	switch {
	case ok:
		o.set = true
		i := slices.IndexFunc(want, func(e E) bool { return e.String() == v })
		if i < 0 {
			o.bad = true
			t.errorf(key, "%q: want %s", v, quoteList(want))
		} else {
			o.v = want[i]
		}
	case t.has(key):
		o.set, o.bad = true, true
	}
	return o
}

// quoteList is "a", "b" or "c".
func quoteList[E fmt.Stringer](want []E) string {
	q := make([]string, len(want))
	for i, w := range want {
		q[i] = strconv.Quote(w.String())
	}
	if len(q) < 2 {
		return strings.Join(q, "")
	}
	return strings.Join(q[:len(q)-1], ", ") + " or " + q[len(q)-1]
}

func positive(d time.Duration) string {
	if d <= 0 {
		return fmt.Sprintf("%v: must be positive", d)
	}
	return ""
}

// resolvePolicy merges a task's policy keys over [defaults] and checks the
// keys against each other and against the schedule (nil if invalid). Keys
// already found invalid are left out of the cross-checks.
func resolvePolicy(t table, own, defaults rawPolicy, sched *schedule.Schedule) taskPolicy {
	lease := own.lease.or(defaults.lease)
	doneTTL := own.doneTTL.or(defaults.doneTTL)
	maxAttempts := own.maxAttempts.or(defaults.maxAttempts)
	timeout := own.timeout.or(defaults.timeout)
	catchup := own.catchup.or(defaults.catchup)
	deadline := own.deadline.or(defaults.deadline)
	catchupLimit := own.catchupLimit.or(defaults.catchupLimit)
	outputTail := own.outputTail.or(defaults.outputTail)
	concurrency := own.concurrency.or(defaults.concurrency)
	retryBackoff := own.retryBackoff.or(defaults.retryBackoff)

	pol := taskPolicy{
		Lease:       pick(lease, DefaultLease),
		MaxAttempts: pick(maxAttempts, DefaultMaxAttempts),
		Timeout:     pick(timeout, DefaultTimeout),
		Catchup:     pick(catchup, DefaultCatchup),
		Deadline:    pick(deadline, 0),

		CatchupLimit: pick(catchupLimit, DefaultCatchupLimit),
		OutputTail:   pick(outputTail, DefaultOutputTail),
		Concurrency:  pick(concurrency, ConcurrencyAllow),
	}
	// The window is unknown when the deadline is invalid, or unset with an
	// invalid schedule: then there is nothing to compare done_ttl with.
	windowKnown := !deadline.bad && (pol.Deadline > 0 || sched != nil)
	var window time.Duration
	if windowKnown {
		window = pol.Deadline
		if window == 0 {
			window = sched.MaxGap()
		}
	}
	switch {
	case !doneTTL.set || doneTTL.bad:
		pol.DoneTTL = defaultDoneTTL(window, sched)
	default:
		pol.DoneTTL = doneTTL.v
		switch {
		case !windowKnown || doneTTL.v >= window:
		case pol.Deadline > 0:
			t.errorf("done_ttl", "%v%s is shorter than deadline %v%s: a slot could run again after its done marker expires; raise done_ttl",
				doneTTL.v, doneTTL.where, deadline.v, deadline.where)
		default:
			t.errorf("done_ttl", "%v%s is shorter than the slot window %v (the longest gap between fire times of %q): a slot could run again after its done marker expires; raise done_ttl or set deadline",
				doneTTL.v, doneTTL.where, window, sched.Spec())
		}
	}
	pol.RetryBackoff = checkRetryBackoff(t, retryBackoff, window)
	if !lease.bad && !doneTTL.bad && pol.Lease > pol.DoneTTL {
		t.errorf("lease", "%v%s is longer than done_ttl %v%s", pol.Lease, lease.where, pol.DoneTTL, doneTTL.where)
	}
	return pol
}

// defaultDoneTTL is done_ttl where no key sets it: DefaultDoneTTL, cut for
// a schedule denser than DefaultDoneMarkers slots in that time to the span
// of that many slots (a task firing every second keeps 10,000 done markers,
// 2h46m40s, not 172,800), and never under window. Nothing needs a marker
// past the window — a claim after the deadline is refused by the store's
// clock, catch-up looks only at open windows, and rerun refuses a closed
// one — but a backfill runs a slot whose marker has expired again, and a
// marker past the window is what lets an operator see and backfill safely.
func defaultDoneTTL(window time.Duration, sched *schedule.Schedule) time.Duration {
	ttl := DefaultDoneTTL
	if sched != nil {
		if sp := sched.Spacing(); sp < DefaultDoneTTL/DefaultDoneMarkers {
			ttl = DefaultDoneMarkers * sp
		}
	}
	return max(ttl, window)
}

// taskPolicy is a task's policy keys once merged over [defaults].
type taskPolicy struct {
	Lease, DoneTTL, Timeout, Deadline time.Duration
	CatchupLimit                      time.Duration
	MaxAttempts, OutputTail           int
	Catchup                           Catchup
	Concurrency                       Concurrency
	RetryBackoff                      RetryBackoff
}

func pick[T any](o opt[T], def T) T {
	if o.set && !o.bad {
		return o.v
	}
	return def
}
