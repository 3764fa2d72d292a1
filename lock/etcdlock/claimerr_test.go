package etcdlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/etcdtest"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/etcdlock"
)

// A claim of a released slot reads its keys, then writes the next attempt
// in a transaction compared on their revisions. When that transaction
// fails (here: its context ends), the claim answers the error; it once
// lost it to a shadowed variable and read a nil answer (a panic under a
// scheduler's shutdown).
func TestClaimAnswersTheComparedTransactionsError(t *testing.T) {
	c := etcdtest.Start(t, 1)
	s := newStore(t, c.Endpoints())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	now := time.Now()
	slot := lock.Slot{Task: "released", ID: "1", Time: now, Deadline: now.Add(time.Minute)}
	cl, err := s.Claim(ctx, slot, "r#1", policy)
	if err != nil || cl.Result != lock.Won {
		t.Fatalf("first claim: %+v, %v", cl, err)
	}
	if err := s.Release(ctx, slot, lock.Owner{ID: "r#1", Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	ended, stop := context.WithCancel(context.Background())
	stop()
	got, err := etcdlock.ClaimAfterRead(ended, s, slot, "r#2", policy)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("claim under an ended context: %+v, err %v; want context.Canceled", got, err)
	}
	// The slot is still free: a live claim counts attempt 2.
	if cl, err := s.Claim(ctx, slot, "r#2", policy); err != nil || cl.Result != lock.Won || cl.Attempt != 2 {
		t.Fatalf("claim after: %+v, %v; want attempt 2 won", cl, err)
	}
}
