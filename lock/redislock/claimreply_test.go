package redislock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/redislock"
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

// Inside its window a claim writes a free slot's state before it counts
// the attempt (claim.lua), so a claim that may not take one takes the
// state back: the slot is free again, whatever stopped it — a counter of
// the wrong type (the slot's error reply), one that is not a number
// (foreign), or the cap reached after a release without backoff.
func TestRefusedClaimLeavesAFreeSlotFree(t *testing.T) {
	s, _, srv := opened(t)
	rdb := srv.Client()
	ctx := context.Background()
	p := lock.Policy{Lease: 5 * time.Second, DoneTTL: time.Minute, MaxAttempts: 1}
	free := func(t *testing.T, slot lock.Slot) {
		t.Helper()
		state, _ := redislock.Keys("slotd", slot)
		if n, err := rdb.Exists(ctx, state).Result(); err != nil || n != 0 {
			t.Errorf("state key %s after a refused claim: exists %d (%v), want gone", state, n, err)
		}
	}
	t.Run("counter of the wrong type", func(t *testing.T) {
		slot := openSlot(t, s)
		_, attempts := redislock.Keys("slotd", slot)
		rdb.RPush(ctx, attempts, "x")
		if _, err := s.Claim(ctx, slot, "a", p); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
			t.Errorf("claim: %v, want WRONGTYPE", err)
		}
		free(t, slot)
	})
	t.Run("foreign counter", func(t *testing.T) {
		slot := openSlot(t, s)
		_, attempts := redislock.Keys("slotd", slot)
		rdb.Set(ctx, attempts, "x", time.Minute)
		if _, err := s.Claim(ctx, slot, "a", p); !errors.Is(err, lock.ErrForeign) {
			t.Errorf("claim: %v, want ErrForeign", err)
		}
		free(t, slot)
	})
	t.Run("exhausted", func(t *testing.T) {
		slot := openSlot(t, s)
		claimWon(t, s, slot, "a", p)
		if err := s.Release(ctx, slot, lock.Owner{ID: "a", Attempt: 1}); err != nil {
			t.Fatal(err)
		}
		if c, err := s.Claim(ctx, slot, "b", p); err != nil || c.Result != lock.Exhausted || c.Attempt != 1 {
			t.Errorf("claim = %+v, %v; want exhausted after attempt 1", c, err)
		}
		free(t, slot)
	})
}

// claim.lua reads a slot's replica and policy from one argument,
// "<lease>:<max>:<ttl>:<replica>", and complete.lua makes the done marker
// from the owner value: a replica id with colons of its own (any string
// is one) keeps its lease, its cap and its name through both.
func TestReplicaIDWithColonsKeepsItsPolicy(t *testing.T) {
	s, _, srv := opened(t)
	ctx := context.Background()
	const id = "host:8080:a"
	p := lock.Policy{Lease: 5 * time.Second, DoneTTL: time.Minute, MaxAttempts: 2}
	slot := openSlot(t, s)
	state, _ := redislock.Keys("slotd", slot)
	c := claimWon(t, s, slot, id, p)
	if v := srv.Client().Get(ctx, state).Val(); v != "run:"+id+":1" {
		t.Fatalf("state %q, want run:%s:1", v, id)
	}
	if ttl := srv.Client().PTTL(ctx, state).Val(); ttl <= 4*time.Second || ttl > p.Lease {
		t.Errorf("lease %v, want %v", ttl, p.Lease)
	}
	if h, err := s.Claim(ctx, slot, "peer", p); err != nil || h.Result != lock.Held || h.Holder != id {
		t.Fatalf("a peer's claim: %v by %q, %v; want held by %q", h.Result, h.Holder, err, id)
	}
	if err := s.Release(ctx, slot, lock.Owner{ID: id, Attempt: c.Attempt}); err != nil {
		t.Fatal(err)
	}
	c2 := claimWon(t, s, slot, id, p)
	if err := s.Release(ctx, slot, lock.Owner{ID: id, Attempt: c2.Attempt}); err != nil {
		t.Fatal(err)
	}
	if e, err := s.Claim(ctx, slot, id, p); err != nil || e.Result != lock.Exhausted {
		t.Fatalf("a third attempt with max_attempts 2: %v, %v; want exhausted", e.Result, err)
	}
	// A fresh slot, completed: the marker names the replica whole.
	slot2 := openSlot(t, s)
	slot2.ID = "2"
	c3 := claimWon(t, s, slot2, id, p)
	if err := s.Complete(ctx, slot2, lock.Owner{ID: id, Attempt: c3.Attempt}, p.DoneTTL); err != nil {
		t.Fatal(err)
	}
	st, err := lock.ReadState(ctx, s, slot2)
	if err != nil || st.Status != "done" || st.Holder != id {
		t.Fatalf("state %+v, %v; want done by %q", st, err, id)
	}
}
