package memlock

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/slotd/slotd/lock"
)

// The embedded store forgets the keys whose TTL has run out, read again
// or not: a replica running a task every 10 ms for 200 s of its clock,
// each slot's done marker and attempts counter living 1 s, holds a few
// hundred keys at the end, not the 40,000 it wrote.
func TestExpiredKeysAreForgotten(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m := New(func() time.Time { return now })
	ctx := context.Background()
	p := lock.Policy{Lease: time.Second, DoneTTL: time.Second, MaxAttempts: 3}
	const n = 20000
	most := 0
	for i := range n {
		slot := lock.Slot{Task: "tick", ID: fmt.Sprint(i), Time: now, Deadline: now.Add(time.Second)}
		c, err := m.Claim(ctx, slot, "r0", p)
		if err != nil || c.Result != lock.Won {
			t.Fatalf("claim %d: %v, %v", i, c.Result, err)
		}
		if err := m.Complete(ctx, slot, lock.Owner{ID: "r0", Attempt: c.Attempt}, p.DoneTTL); err != nil {
			t.Fatalf("complete %d: %v", i, err)
		}
		now = now.Add(10 * time.Millisecond)
		most = max(most, len(m.keys))
	}
	t.Logf("at most %d keys held for %d slots written", most, n)
	// The sweeps forget only what ran out: the slots of the last second
	// are still done, and a claim of one answers so.
	for i := n - 90; i < n; i++ {
		slot := lock.Slot{Task: "tick", ID: fmt.Sprint(i), Time: now, Deadline: now.Add(time.Second)}
		if c, err := m.Claim(ctx, slot, "r1", p); err != nil || c.Result != lock.Done {
			t.Fatalf("slot %d, done %v ago: claimed %v, %v; want done (its marker lives 1 s)", i, time.Duration(n-i)*10*time.Millisecond, c.Result, err)
		}
	}
	// 100 slots live (1 s at one per 10 ms), two or three keys each, and
	// up to as many again expired and not yet swept.
	if most > 2*3*100+2*1024 {
		t.Errorf("the store held up to %d keys for %d slots written, 100 of them live; want a few hundred", most, n)
	}
}
