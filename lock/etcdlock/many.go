package etcdlock

import (
	"context"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/slotd/slotd/lock"
)

// claimsPerTxn is how many slots' first claims one transaction carries,
// each a nested transaction of its own (so one slot's compare decides
// nothing for another), within etcd's default --max-txn-ops of 128.
const claimsPerTxn = 100

// txnsInFlight bounds the batched claim transactions a ClaimMany has in
// flight at once.
const txnsInFlight = 8

// ClaimMany claims every request, as lock.ClaimMany describes: the first
// claims of up to claimsPerTxn slots go in one transaction (one Raft entry,
// one round trip), up to txnsInFlight such transactions at once, so a burst
// of ten thousand slots costs a hundred transactions, not ten thousand; a
// slot whose keys exist already goes on as Claim does from the keys that
// transaction read. f gets the replies on the caller's goroutine as they
// come; each won claim's revision is its batch's.
func (s *Store) ClaimMany(ctx context.Context, reqs []lock.ClaimRequest, f func(int, lock.ClaimReply)) {
	type answer struct {
		i int
		r lock.ClaimReply
	}
	answers := make(chan answer, claimsPerTxn)
	go func() {
		var wg sync.WaitGroup
		sem := make(chan struct{}, txnsInFlight)
		for from := 0; from < len(reqs); from += claimsPerTxn {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				s.claimBatch(ctx, reqs, from, min(from+claimsPerTxn, len(reqs)), func(i int, r lock.ClaimReply) {
					answers <- answer{i, r}
				})
			}()
		}
		wg.Wait()
		close(answers)
	}()
	for a := range answers {
		f(a.i, a.r)
	}
}

// claimBatch claims reqs[from:to] in one transaction of nested first
// claims, and answers each through out.
func (s *Store) claimBatch(ctx context.Context, reqs []lock.ClaimRequest, from, to int, out func(int, lock.ClaimReply)) {
	sent := time.Now()
	reply := func(i int, c lock.Claim, err error) {
		if err != nil {
			out(i, lock.ClaimReply{Err: s.claimErr(reqs[i].Slot, err)})
			return
		}
		out(i, lock.ClaimReply{Claim: c})
	}
	lo, hi, err := s.clock.now(ctx)
	if err != nil {
		for i := from; i < to; i++ {
			reply(i, lock.Claim{}, err)
		}
		return
	}
	type pending struct {
		i    int
		t    ticket
		done clientv3.LeaseID
	}
	var ps []pending
	var ops []clientv3.Op
	for i := from; i < to; i++ {
		q := reqs[i]
		if outside(q.Slot, q.Policy, lo, hi) { // rare: Claim answers early, late, held or done
			c, err := s.Claim(ctx, q.Slot, q.Owner, q.Policy)
			out(i, lock.ClaimReply{Claim: c, Err: err})
			continue
		}
		t, err := s.leases.forClaim(ctx, q.Owner, q.Policy.Lease)
		if err != nil {
			reply(i, lock.Claim{}, err)
			continue
		}
		done, err := s.leases.bucket(ctx, q.Policy.DoneTTL)
		if err != nil {
			reply(i, lock.Claim{}, err)
			continue
		}
		ps = append(ps, pending{i, t, done})
		ops = append(ops, clientv3.OpTxn(firstClaimIf(s, q.Slot), firstClaimThen(s, q.Slot, q.Owner, t.id, done), readSlot(s, q.Slot)))
	}
	if len(ops) == 0 {
		return
	}
	octx, cancel := opContext(ctx)
	resp, err := s.cli.Txn(octx).Then(ops...).Commit()
	cancel()
	if err != nil {
		for _, p := range ps {
			q := reqs[p.i]
			if isLeaseNotFound(err) { // one lease gone fails the batch: each on its own, which renews it
				c, err := s.Claim(ctx, q.Slot, q.Owner, q.Policy)
				out(p.i, lock.ClaimReply{Claim: c, Err: err})
				continue
			}
			reply(p.i, lock.Claim{}, err)
		}
		return
	}
	for k, p := range ps {
		q := reqs[p.i]
		c := lock.Claim{Now: lo.UTC(), Sent: sent}
		nested := (*clientv3.TxnResponse)(resp.Responses[k].GetResponseTxn())
		c, on, err := s.claimFrom(ctx, c, q.Slot, q.Owner, q.Policy, p.t.id, p.done, nested, nil)
		var t ticket
		if err == nil && on != 0 {
			t, err = s.ticketFor(p.t, on)
		}
		if err == nil && on != 0 {
			if c.Revision == 0 {
				c.Revision = resp.Header.Revision
			}
			done := p.done
			if on != p.t.id { // found again: its counter is on a lease not known here
				done = 0
			}
			c, err = s.won(ctx, c, q.Slot, q.Owner, q.Policy, t, done)
		}
		reply(p.i, c, err)
	}
}

// SlotsInFlight is how many slots' claims one ClaimMany has in flight at
// most: the concurrency at which a raw baseline compares.
const SlotsInFlight = claimsPerTxn * txnsInFlight
