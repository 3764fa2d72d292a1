package redislock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/internal/quorum"
	"github.com/slotd/slotd/lock/internal/schema"
)

// A Redlock claim: one round of the claim script on every master, and the
// decision its replies make (won on a quorum within the validity, held,
// settled, or no quorum), with the undo of a round that was not won.

// Claim implements Store: the claim script on every node. Won needs a
// quorum of grants within the validity; Held a quorum naming one holder;
// any other result a quorum of nodes that answered it; anything else (a
// split vote, too few nodes answering) is an error wrapping ErrNoQuorum,
// after which the caller should wait a random delay. A claim that is not
// won is undone on every node that granted it (owner-checked; a node whose
// reply was lost keeps its grant until the lease runs out).
func (r *Redlock) Claim(ctx context.Context, slot lock.Slot, replica string, p lock.Policy) (lock.Claim, error) {
	sent := time.Now()
	res := all(ctx, r, p.Lease, func(ctx context.Context, n *Store) (lock.Claim, error) {
		return n.Claim(ctx, slot, replica, p)
	})
	var (
		count    = map[lock.Result]int{}
		answered int
		att      = make([]int, len(res)) // the attempt each node granted, 0: none
		top      int
		errs     []error
	)
	for i, nr := range res {
		if nr.Err != nil {
			errs = append(errs, fmt.Errorf("node %d: %w", i, nr.Err))
			continue
		}
		answered++
		count[nr.Val.Result]++
		if nr.Val.Result == lock.Won {
			att[i] = nr.Val.Attempt
			top = max(top, att[i])
		}
	}
	q := r.quorum()
	if count[lock.Won] >= q {
		won := r.align(ctx, slot, replica, p, att, top)
		if v := quorum.Validity(p.Lease, time.Since(sent)); won >= q && v > 0 {
			c := lock.Claim{Result: lock.Won, Attempt: top, Sent: sent}
			c.Now, c.Base = r.merge(res, lock.Won)
			return c, nil
		} else if won < q {
			errs = append(errs, fmt.Errorf("attempt %d renumbered on %d of %d nodes", top, won, len(r.nodes)))
		} else {
			errs = append(errs, fmt.Errorf("granted after its validity ran out (the round took %v of a %v lease)",
				time.Since(sent).Round(time.Millisecond), p.Lease))
		}
		count[lock.Won] = 0
	}
	r.undo(ctx, slot, replica, p, att)
	for _, want := range []lock.Result{lock.Done, lock.Held, lock.Exhausted, lock.Early, lock.Late} {
		if count[want] >= q {
			// Held needs a quorum naming one holder; nodes held by
			// different contenders are a split vote, which they are giving
			// back too.
			if c := r.decide(res, want, sent); want != lock.Held || c.agreed {
				return c.Claim, nil
			}
		}
	}
	foreign := 0
	for _, nr := range res {
		if errors.Is(nr.Err, lock.ErrForeign) {
			foreign++
		}
	}
	tally := errors.New(tallyText(count, answered, len(r.nodes), q))
	if foreign >= q {
		return lock.Claim{}, fmt.Errorf("lock: claim %s: %w", slot, errors.Join(append([]error{tally}, errs...)...))
	}
	return lock.Claim{}, fmt.Errorf("lock: claim %s: %w: %w", slot, ErrNoQuorum, errors.Join(append([]error{tally}, errs...)...))
}

// align renumbers the grants whose attempt is below top to top, and
// returns how many nodes now hold the slot as attempt top. att is updated
// to what each node holds.
func (r *Redlock) align(ctx context.Context, slot lock.Slot, replica string, p lock.Policy, att []int, top int) int {
	won, behind := 0, false
	for _, a := range att {
		won += min(a, 1)
		behind = behind || (a > 0 && a < top)
	}
	if !behind { // the usual case: every winner counted alike
		return won
	}
	state, attempts := Keys(r.nodes[0].prefix, slot)
	want := schema.Run(lock.Owner{ID: replica, Attempt: top})
	res := all(ctx, r, p.Lease, func(ctx context.Context, n *Store) (bool, error) {
		i := slices.Index(r.nodes, n)
		switch {
		case att[i] == 0:
			return false, nil
		case att[i] == top:
			return true, nil
		}
		ok, err := redlockAlignScript.Run(ctx, n.rdb, []string{state, attempts},
			schema.Run(lock.Owner{ID: replica, Attempt: att[i]}), want, top, p.DoneTTL.Milliseconds()).Int()
		return ok == 1, err
	})
	won = 0
	for i, nr := range res {
		if nr.Err == nil && nr.Val {
			att[i] = top
			won++
		}
	}
	return won
}

// undo takes back the grants of a claim that was not won, each under the
// attempt its node holds, with the attempts they counted (nothing ran), on
// a context the caller's cancellation does not stop. It wakes no watcher
// (see redlock_unclaim.lua).
func (r *Redlock) undo(ctx context.Context, slot lock.Slot, replica string, p lock.Policy, att []int) {
	if !slices.ContainsFunc(att, func(a int) bool { return a > 0 }) {
		return // no grant to take back: the usual loss
	}
	state, attempts := Keys(r.nodes[0].prefix, slot)
	all(context.WithoutCancel(ctx), r, p.Lease, func(ctx context.Context, n *Store) (bool, error) {
		a := att[slices.Index(r.nodes, n)]
		if a == 0 {
			return false, nil
		}
		ok, err := redlockUnclaimScript.Run(ctx, n.rdb, []string{state, attempts},
			schema.Run(lock.Owner{ID: replica, Attempt: a}), a).Int()
		return ok == 1, err
	})
}

// merge returns the median of the clocks of the nodes that answered want,
// and the highest base among them.
func (r *Redlock) merge(res []quorum.Result[lock.Claim], want lock.Result) (time.Time, int) {
	var nows []time.Time
	base := 0
	for _, nr := range res {
		if nr.Err == nil && nr.Val.Result == want {
			nows = append(nows, nr.Val.Now)
			base = max(base, nr.Val.Base)
		}
	}
	return median(nows), base
}

// decide builds the quorum's answer want (not Won) from the nodes that gave
// it: the holder most of them name with its highest attempt, and for Held
// and Early the wait until enough of them would answer otherwise for a
// quorum to grant.
func (r *Redlock) decide(res []quorum.Result[lock.Claim], want lock.Result, sent time.Time) decision {
	c := lock.Claim{Result: want, Sent: sent}
	c.Now, c.Base = r.merge(res, want)
	holders := map[string]int{}
	var waits []time.Duration
	for _, nr := range res {
		if nr.Err != nil || nr.Val.Result != want {
			continue
		}
		v := nr.Val
		waits = append(waits, v.Wait)
		c.Backoff = c.Backoff || v.Backoff // Early, Late: a retry backoff on a node that agreed
		if v.Holder != "" {
			holders[lock.OwnerID(v.Holder, v.Instance)]++
		}
		if want == lock.Exhausted {
			c.Attempt = max(c.Attempt, v.Attempt)
		}
	}
	// Holders are told apart by instance too: two processes started with
	// one replica id are two contenders.
	var top string
	for h, n := range holders {
		if n > holders[top] || (n == holders[top] && h < top) {
			top = h
		}
	}
	c.Holder, c.Instance = schema.SplitOwner(top)
	for _, nr := range res {
		if nr.Err == nil && nr.Val.Result == want && top != "" && lock.OwnerID(nr.Val.Holder, nr.Val.Instance) == top {
			c.Attempt = max(c.Attempt, nr.Val.Attempt)
		}
	}
	if want == lock.Held || want == lock.Early {
		// The nodes that did not answer want count for a grant already; the
		// k-th shortest wait frees the rest of a quorum.
		slices.Sort(waits)
		k := max(1, r.quorum()-(len(r.nodes)-len(waits)))
		c.Wait = waits[k-1]
	}
	return decision{c, holders[top] >= r.quorum()}
}

// decision is a quorum's answer, and whether a quorum of the nodes named
// the same holder.
type decision struct {
	lock.Claim
	agreed bool
}

func tallyText(count map[lock.Result]int, answered, n, q int) string {
	s := fmt.Sprintf("%d of %d nodes answered, %d needed to agree", answered, n, q)
	for _, res := range []lock.Result{lock.Won, lock.Held, lock.Done, lock.Exhausted, lock.Early, lock.Late} {
		if count[res] > 0 {
			s += fmt.Sprintf("; %s: %d", res, count[res])
		}
	}
	return s
}

// median is the middle of ts (the later of the two middles), or the zero
// time if ts is empty.
func median(ts []time.Time) time.Time {
	if len(ts) == 0 {
		return time.Time{}
	}
	ts = slices.Clone(ts)
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	return ts[len(ts)/2]
}
