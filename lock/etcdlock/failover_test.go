package etcdlock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/etcdtest"
	"github.com/slotd/slotd/lock"
)

// The scenario that loses a done marker on Redis (a failover before the
// replica has the completion: docs/stores.md) on etcd: the leader is
// killed while completions are being acknowledged, and a peer on another
// client finds every slot whose completion was acknowledged done — none
// runs twice.
func TestAcknowledgedCompletionSurvivesLeaderDeath(t *testing.T) {
	c := etcdtest.Start(t, 3)
	h := harness(t, c)
	peer := newStore(t, c.Endpoints())
	ctx := context.Background()
	slots := slotsOf(t, h, 200)
	for _, s := range slots {
		mustWin(t, h, s, "a#1")
	}
	acked := make([]bool, len(slots))
	var wg sync.WaitGroup
	for i, s := range slots {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// as lock.Lease.Complete does: retry an unknown outcome, here
			// for as long as a 5s lease would allow
			for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
				cctx, cancel := context.WithDeadline(ctx, deadline)
				err := h.Store.Complete(cctx, s, lock.Owner{ID: "a#1", Attempt: 1}, policy.DoneTTL)
				cancel()
				if err == nil {
					acked[i] = true
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
		}()
		if i == len(slots)/4 {
			c.Leader().Stop()
		}
	}
	wg.Wait()
	n := 0
	for i, s := range slots {
		if !acked[i] {
			continue
		}
		n++
		cl, err := peer.Claim(ctx, s, "b#1", policy)
		if err != nil || cl.Result != lock.Done || cl.Holder != "a" {
			t.Errorf("slot %s, completion acknowledged: peer's claim = %+v, %v; want done by a", s, cl, err)
		}
	}
	if n == 0 {
		t.Fatalf("no completion of %d acknowledged across the election", len(slots))
	}
	t.Logf("%d of %d completions acknowledged across the leader's death; every one found done by a peer", n, len(slots))
}
