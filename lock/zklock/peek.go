package zklock

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/slotd/slotd/lock"
)

// peekInFlight bounds the reads Peek keeps in flight at once: the client
// pipelines them over its one connection.
const peekInFlight = 64

// Peek implements lock.Peeker: the slot nodes first, all at once (up to
// peekInFlight in flight), then the run nodes of only those slots whose
// node says neither done nor a retry backoff: a done slot has no run node
// (its completion deleted it in the multi-op that wrote the marker), nor
// has one in a backoff (its release did; no claim wins before its end),
// nor a slot with no node. Slots left to a preferred claimant that has
// finished them, the common case, so cost one read each where States
// reads two.
//
// A running slot's TTL is what is left of its holder's lease judged by the
// lower bound of the leader's clock, as States judges it: at most the
// lease. It costs no read of its own (the run node says when its lease
// was last renewed), so it is given whether asked for (ttl) or not. Reads are the member's, which may lag the leader: a stale "free"
// makes the reader claim (the claim reports the truth); a stale "running",
// "done" or backoff of a slot since released or rerun is corrected by the
// release notice (releases.go), which the reader acts on even after its
// read; a stale lease is read again when it would end.
func (s *Store) Peek(ctx context.Context, slots []lock.Slot, ttl []bool) ([]lock.State, error) {
	if ttl != nil && len(ttl) != len(slots) {
		return nil, fmt.Errorf("zklock: peek at %d slots: %d TTL flags", len(slots), len(ttl))
	}
	lo, _, err := s.now(ctx)
	if err != nil {
		return nil, fmt.Errorf("zklock: peek at %d slots: %w", len(slots), err)
	}
	out := make([]lock.State, len(slots))
	sns := make([]node, len(slots))
	if err := each(len(slots), func(i int) error {
		var err error
		sns[i], err = s.get(ctx, s.SlotPath(slots[i]), false)
		return err
	}); err != nil {
		return nil, fmt.Errorf("zklock: peek at %d slots: %w", len(slots), err)
	}
	var runs []int // the slots whose run node says
	for i, sn := range sns {
		out[i] = lock.State{Status: "free"}
		if !sn.exists {
			continue
		}
		d, err := decodeSlot(sn.data)
		switch {
		case err != nil:
			out[i].Status = "foreign" // its claim says what is wrong
		case d.done != "":
			st, _ := parseState(d.done)
			out[i].Status = st.Status
		case lo.Before(d.notBefore):
			out[i].Status = lock.Value{NotBefore: d.notBefore}.State().Status
		default:
			runs = append(runs, i)
		}
	}
	if err := each(len(runs), func(j int) error {
		i := runs[j]
		run, err := s.get(ctx, s.RunPath(slots[i]), false)
		if err != nil || !run.exists {
			return err
		}
		st, _ := s.decodeState(slots[i], sns[i], run, lo)
		out[i] = lock.State{Status: st.Status}
		if st.Status == "running" {
			out[i].TTL = st.TTL
			if r := decodeRun(run.data); r.lease > 0 {
				out[i].TTL = min(st.TTL, r.lease)
			}
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("zklock: peek at %d slots: %w", len(slots), err)
	}
	return out, nil
}

// each calls f(0..n-1), up to peekInFlight at once, and returns the first
// error any returned.
func each(n int, f func(i int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for range min(n, peekInFlight) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}
