package scheduler

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/memlock"
)

// changingFleet is a store whose live set is whatever the test says, and
// which tells OnFleetChange's callers nothing: a change made before they
// registered.
type changingFleet struct {
	*memlock.Store
	mu   sync.Mutex
	live []string
	// notify: OnFleetChange calls f once as it registers it (a notice
	// that comes at once).
	notify bool
}

func (f *changingFleet) Announce(_ context.Context, _, _ string, ttl time.Duration) (lock.Presence, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return lock.Presence{TTL: ttl, Live: slices.Clone(f.live)}, nil
}

func (f *changingFleet) OnFleetChange(notice func()) (stop func()) {
	if f.notify {
		notice()
	}
	return func() {}
}

// A peer that announces between this replica's announce and its
// watchFleet's registration sends its notice to no one here; watchFleet
// reads the set once more as it starts, so the two replicas agree on each
// slot's preferred claimant from the first fire, not from the next clock
// check (an hour here). Without that read, two replicas started together
// each claimed the other's share (TestLosersSettleOnCompletionWithoutReclaiming
// failed one run in three).
func TestWatchFleetReadsTheSetAsItStarts(t *testing.T) {
	for _, notify := range []bool{false, true} {
		f := &changingFleet{Store: memlock.New(time.Now), live: []string{"r1"}, notify: notify}
		s := New(nil, f, WithReplica("r1"), WithClockCheck(time.Hour))
		ctx, cancel := context.WithCancel(context.Background())
		if err := s.announce(ctx); err != nil {
			t.Fatal(err)
		}
		s.announced = true
		f.mu.Lock()
		f.live = []string{"r1", "r2"} // announced before watchFleet registers
		f.mu.Unlock()
		done := make(chan struct{})
		go func() { defer close(done); s.watchFleet(ctx) }()
		deadline := time.Now().Add(10 * time.Second)
		for {
			if p := s.live.Load(); p != nil && len(*p) == 2 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("notice at registration %v: the live set read at start stayed {r1}", notify)
			}
			time.Sleep(time.Millisecond)
		}
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("notice at registration %v: watchFleet did not return after its context ended", notify)
		}
	}
}
