package redislock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/slotd/slotd/lock"
)

// A Peek asks Redis for the lease left of those running slots only whose
// TTL its caller wants: a deferring replica whose slots' leases outlast
// their windows sends no PTTL at all, where it sent one per slot.
func TestPeekReadsOnlyTheTTLsAsked(t *testing.T) {
	s, srv := redisStore(t)
	ctx := context.Background()
	p := lock.Policy{Lease: 5 * time.Second, DoneTTL: time.Minute, MaxAttempts: 3}
	base := openSlot(t, s)
	slots := make([]lock.Slot, 4)
	for i := range slots {
		slots[i] = base
		slots[i].ID = fmt.Sprint(i)
		claimWon(t, s, slots[i], "a", p)
	}
	for _, c := range []struct {
		ttl   []bool
		pttls int
	}{{nil, 4}, {[]bool{false, true, false, true}, 2}, {make([]bool, 4), 0}} {
		before := calls(t, srv.Client(), "pttl")
		sts, err := s.Peek(ctx, slots, c.ttl)
		if err != nil {
			t.Fatal(err)
		}
		if n := calls(t, srv.Client(), "pttl") - before; n != c.pttls {
			t.Errorf("TTLs asked %v: %d PTTLs, want %d", c.ttl, n, c.pttls)
		}
		for i, st := range sts {
			asked := c.ttl == nil || c.ttl[i]
			if st.Status != "running" || asked != (st.TTL > 0) {
				t.Errorf("TTLs asked %v: slot %d read %q, lease left %v", c.ttl, i, st.Status, st.TTL)
			}
		}
	}
}
