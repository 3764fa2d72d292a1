package redislock_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/redislock"
)

// lostClaim sends replica's claim of slot to a server stopped (SIGSTOP) so
// that its reply is lost — the call's ctx ends first — then resumes the
// server, which runs the claim it had received, and waits for it to land.
func lostClaim(t *testing.T, r *redislock.Store, srv *redistest.Server, slot lock.Slot, replica string, p lock.Policy) {
	t.Helper()
	// A claim of another slot first: the script is then loaded, and the
	// one sent to the stopped server is the EVALSHA that runs.
	warm := slot
	warm.ID += "-warm"
	if _, err := r.Claim(context.Background(), warm, replica, p); err != nil {
		t.Fatal(err)
	}
	srv.Signal(syscall.SIGSTOP)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	c, err := r.Claim(ctx, slot, replica, p)
	cancel()
	srv.Signal(syscall.SIGCONT)
	if err == nil {
		t.Fatalf("claim to a stopped server answered %v: the reply was not lost", c.Result)
	}
	state, _ := redislock.Keys("slotd", slot)
	rdb := srv.Client()
	want := lock.Value{Owner: lock.Owner{ID: replica, Attempt: 1}}.String()
	deadline := time.Now().Add(10 * time.Second)
	for {
		v, _ := rdb.Get(context.Background(), state).Result()
		if v == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the claim sent before the stop never landed: %s = %q, want %q", state, v, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A claim whose reply is lost costs no attempt: it landed (attempt 1, held
// by the claimant), and the claimant's next claim of the slot takes that
// value over — won, attempt 1 — where it used to find the slot held by
// itself, wait out the lease and find, with max_attempts = 1, nothing left.
// A peer still finds it held, and the takeover is one claim's: the next
// claim of the same owner finds it held.
func TestLostClaimReplyCostsNoAttempt(t *testing.T) {
	t.Parallel()
	r, srv := redisStore(t)
	slot := openSlot(t, r)
	p := lock.Policy{Lease: 30 * time.Second, DoneTTL: time.Hour, MaxAttempts: 1}
	lostClaim(t, r, srv, slot, "r1#a", p)

	if c, err := r.Claim(context.Background(), slot, "r2#b", p); err != nil || c.Result != lock.Held || c.Holder != "r1" {
		t.Fatalf("a peer's claim: %v held by %q, %v; want held by r1", c.Result, c.Holder, err)
	}
	c, err := r.Claim(context.Background(), slot, "r1#a", p)
	if err != nil || c.Result != lock.Won || c.Attempt != 1 {
		t.Fatalf("the claimant's next claim: %v attempt %d, %v; want won attempt 1 (its own claim in doubt)", c.Result, c.Attempt, err)
	}
	if c, err := r.Claim(context.Background(), slot, "r1#a", p); err != nil || c.Result != lock.Held {
		t.Fatalf("a second claim of the same owner: %v attempt %d, %v; want held (one claim takes the doubt over)", c.Result, c.Attempt, err)
	}
	lease := lock.Hold(context.Background(), r, slot, "r1#a", c, p.Lease, lock.LeaseHooks{})
	if err := lease.Complete(context.Background(), p.DoneTTL); err != nil {
		t.Fatalf("complete the attempt taken over: %v", err)
	}
	st, err := lock.ReadState(context.Background(), r, slot)
	if err != nil || st.Attempts != 1 {
		t.Fatalf("state after: %+v, %v; want 1 attempt counted", st, err)
	}
}

// The takeover is the claimant's own value only, of an attempt it was
// never answered won for: a claim of another process with the same
// replica id (another instance nonce) finds the slot held, and once the
// owner has taken its claim over, its next claim finds it held too.
func TestClaimInDoubtTakesOnlyItsOwnValue(t *testing.T) {
	t.Parallel()
	r, srv := redisStore(t)
	slot := openSlot(t, r)
	p := lock.Policy{Lease: 30 * time.Second, DoneTTL: time.Hour, MaxAttempts: 3}
	lostClaim(t, r, srv, slot, "r1#a", p)

	if c, err := r.Claim(context.Background(), slot, "r1#b", p); err != nil || c.Result != lock.Held {
		t.Fatalf("another instance's claim: %v, %v; want held", c.Result, err)
	}
	if c, err := r.Claim(context.Background(), slot, "r1#a", p); err != nil || c.Result != lock.Won || c.Attempt != 1 {
		t.Fatalf("the owner's claim in doubt: %v attempt %d, %v; want won attempt 1", c.Result, c.Attempt, err)
	}
	if c, err := r.Claim(context.Background(), slot, "r1#a", p); err != nil || c.Result != lock.Held {
		t.Fatalf("the owner's claim after its take-over: %v attempt %d, %v; want held (attempt 1 was answered won)", c.Result, c.Attempt, err)
	}
}

// go-redis resends a command after a network error: a claim whose first
// send landed then comes back held by the claimant's own value, not as an
// error. Such a claim (its value's attempt never answered won to this
// Store) is sent once more at once, asking for the take-over: won, attempt
// 1. Here the first send is another Store's, with the same owner id.
func TestClaimHeldByItsOwnUnansweredClaimTakesItOver(t *testing.T) {
	t.Parallel()
	r, srv := redisStore(t)
	slot := openSlot(t, r)
	p := lock.Policy{Lease: 30 * time.Second, DoneTTL: time.Hour, MaxAttempts: 1}
	first := redislock.New(srv.Client(), "slotd")
	t.Cleanup(func() { first.Close() })
	if c, err := first.Claim(context.Background(), slot, "r1#a", p); err != nil || c.Result != lock.Won {
		t.Fatalf("the first send: %v, %v", c.Result, err)
	}
	c, err := r.Claim(context.Background(), slot, "r1#a", p)
	if err != nil || c.Result != lock.Won || c.Attempt != 1 {
		t.Fatalf("the resent claim: %v attempt %d, %v; want won attempt 1", c.Result, c.Attempt, err)
	}
	if c, err := r.Claim(context.Background(), slot, "r2#b", p); err != nil || c.Result != lock.Held {
		t.Fatalf("a peer's claim: %v, %v; want held", c.Result, err)
	}
}
