package redislock_test

import (
	"context"
	"testing"
	"time"

	"github.com/slotd/slotd/lock"
)

// A won first attempt comes back from claim.lua as one integer (the
// server's clock in ms × 1000 + the attempt): the claim it decodes to
// carries the attempt and the server's clock, as the six-element reply of
// every other result does.
func TestWonClaimCarriesAttemptAndServerClock(t *testing.T) {
	s, _, srv := opened(t)
	ctx := context.Background()
	p := lock.Policy{Lease: 5 * time.Second, DoneTTL: time.Minute, MaxAttempts: 3}
	slot := openSlot(t, s)
	before, err := srv.Client().Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	c := claimWon(t, s, slot, "a", p)
	after, err := srv.Client().Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if c.Attempt != 1 || c.Base != 0 || c.Wait != 0 {
		t.Errorf("won claim = attempt %d, base %d, wait %v; want 1, 0, 0", c.Attempt, c.Base, c.Wait)
	}
	if c.Now.Before(before.Truncate(time.Millisecond)) || c.Now.After(after) {
		t.Errorf("won claim's clock %v, want the server's, between %v and %v", c.Now, before, after)
	}
	// The second attempt, after a release, is won the same way.
	if err := s.Release(ctx, slot, lock.Owner{ID: "a", Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	if c := claimWon(t, s, slot, "b", p); c.Attempt != 2 || c.Now.Before(before.Truncate(time.Millisecond)) {
		t.Errorf("second claim = attempt %d at %v; want 2, at the server's clock", c.Attempt, c.Now)
	}
}
