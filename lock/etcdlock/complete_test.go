package etcdlock_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/etcdtest"
	"github.com/slotd/slotd/lock"
)

// A holder whose task succeeded completes its slot although the quorum is
// lost for longer than its lease: its completion compares the slot's
// value with its own, so it keeps trying past the lease (bounded by the
// slot's deadline, as the engine bounds it) and lands once the quorum is
// back; the slot is done by attempt 1, and a peer finds it done instead
// of running it again. (Before, the completion gave up at 0.9 × lease,
// and the slot ran again.)
func TestCompletionOutlastsShortQuorumLoss(t *testing.T) {
	c := etcdtest.Start(t, 3)
	h := harness(t, c)
	peer := newStore(t, c.Endpoints())
	ctx := context.Background()
	slot := slotsOf(t, h, 1)[0]
	won := mustWin(t, h, slot, "a#1")
	var lost atomic.Int64 // ns after the claim
	l := lock.Hold(ctx, h.Store, slot, "a#1", won, policy.Lease, lock.LeaseHooks{
		Lost: func(error) { lost.Store(int64(time.Since(won.Sent))) },
	})
	// The quorum goes as the task ends: two of three members down.
	down := []*etcdtest.Member{c.Members[1], c.Members[2]}
	for _, m := range down {
		m.Stop()
	}
	stopped := time.Now()
	done := make(chan error, 1)
	go func() {
		cctx, cancel := context.WithTimeout(ctx, time.Until(slot.Deadline))
		defer cancel()
		done <- l.Complete(cctx, policy.DoneTTL)
	}()
	// Down for twice the lease: longer than the holder's lease lasts.
	select {
	case err := <-done:
		t.Fatalf("completion ended %v into the quorum loss: %v", time.Since(stopped), err)
	case <-time.After(2 * policy.Lease):
	}
	for _, m := range down {
		m.Restart()
	}
	back := time.Now()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("completion after the quorum came back: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("completion not answered 30s after the quorum came back")
	}
	t.Logf("quorum lost %v; lease lost %v after the claim (lease %v); completed %v after the quorum came back",
		back.Sub(stopped), time.Duration(lost.Load()), policy.Lease, time.Since(back))
	if !l.Lost() {
		t.Errorf("the lease was not lost during a %v quorum loss: the test shows nothing", back.Sub(stopped))
	}
	got, err := peer.Claim(ctx, slot, "b#1", policy)
	if err != nil || got.Result != lock.Done || got.Holder != "a" || got.Attempt != 1 {
		t.Fatalf("peer's claim = %+v, %v; want done by a, attempt 1", got, err)
	}
}
