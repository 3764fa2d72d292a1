package scheduler_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/testlane"
	"github.com/slotd/slotd/internal/zktest"
	"github.com/slotd/slotd/lock"
	zklock "github.com/slotd/slotd/lock/zklock"
	"github.com/slotd/slotd/scheduler"
)

// zkStores are n stores (sessions) on the package's shared three-member
// ensemble, under a root of the test's own.
func zkStores(t *testing.T, n int, timeout time.Duration) []lock.Store {
	t.Helper()
	return zkStoresOn(t, zktest.Shared(t, 3), "/"+sharedPrefix(), n, timeout)
}

// zkStoresOn are n stores (sessions) under root on the members at servers.
func zkStoresOn(t *testing.T, servers []string, root string, n int, timeout time.Duration) []lock.Store {
	t.Helper()
	var out []lock.Store
	for range n {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		s, err := zklock.Dial(ctx, zklock.Options{Servers: servers, Root: root, SessionTimeout: timeout})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		out = append(out, s)
	}
	return out
}

// On ZooKeeper too, replicas with clocks two minutes ahead and behind never
// start a slot before its time by the leader's clock (the mtime it stamps
// on the claim), and never run one twice.
func TestZooKeeperSkewedClocksRunNothingEarly(t *testing.T) {
	testlane.Parallel(t, heavyLane)
	stores := zkStores(t, 3, 3*time.Second)
	l := newLedger()
	task := testTask(t, "skew", "@every 1s", l.job(ok), nil)
	skews := []time.Duration{2 * time.Minute, -2 * time.Minute, 0}
	for i, s := range stores {
		startReplica(t, fmt.Sprintf("r%d", i), s, time.Second, []scheduler.Task{task},
			scheduler.WithClock(offsetClock{skews[i]}))
	}
	rs := l.await(t, "4 slots", 20*time.Second, func(rs []record) bool { return len(rs) >= 4 })
	for slot, runs := range bySlot(rs) {
		if len(runs) != 1 {
			t.Errorf("slot %s ran %d times", slot, len(runs))
		}
		// The test's clock is the leader's: both are this machine's.
		if early := runs[0].run.SlotTime.Sub(runs[0].started); early > 0 {
			t.Errorf("slot %s started %v early on %s", slot, early, runs[0].run.Replica)
		}
		if runs[0].run.Revision == 0 {
			t.Errorf("slot %s: no store revision (zxid) handed to the task", slot)
		}
	}
}

// stepClock steps forward by d at at, as a wall clock set wrong by an
// operator or a broken NTP source does.
type stepClock struct {
	at time.Time
	d  time.Duration
}

func (c stepClock) Now() time.Time {
	if now := time.Now(); now.After(c.at) {
		return now.Add(c.d)
	}
	return time.Now()
}
func (c stepClock) NewTimer(d time.Duration) scheduler.Timer { return stdTimer{time.NewTimer(d)} }
func (c stepClock) AfterFunc(d time.Duration, f func()) scheduler.Timer {
	return stdTimer{time.AfterFunc(d, f)}
}

// earlyCounter counts the claims the store refused as early.
type earlyCounter struct {
	lock.Store
	early atomic.Int64
}

func (s *earlyCounter) Claim(ctx context.Context, slot lock.Slot, replica string, p lock.Policy) (lock.Claim, error) {
	c, err := s.Store.Claim(ctx, slot, replica, p)
	if c.Result == lock.Early {
		s.early.Add(1)
	}
	return c, err
}

// A replica whose clock steps three minutes ahead after its skew was
// measured fires the slots of three minutes later: the store answers from
// the leader's clock, so none of them starts early, and the other
// replicas still run every slot once.
func TestZooKeeperSteppedClockStartsNothingEarly(t *testing.T) {
	testlane.Parallel(t, heavyLane)
	stores := zkStores(t, 2, 3*time.Second)
	l := newLedger()
	task := testTask(t, "step", "@every 1s", l.job(ok), nil)
	stepped := &earlyCounter{Store: stores[0]}
	startReplica(t, "stepped", stepped, time.Second, []scheduler.Task{task},
		scheduler.WithClock(stepClock{at: time.Now().Add(2 * time.Second), d: 3 * time.Minute}),
		scheduler.WithClockCheck(time.Hour))
	startReplica(t, "right", stores[1], time.Second, []scheduler.Task{task})
	rs := l.await(t, "6 slots", 20*time.Second, func(rs []record) bool { return len(rs) >= 6 })
	for slot, runs := range bySlot(rs) {
		if len(runs) != 1 {
			t.Errorf("slot %s ran %d times", slot, len(runs))
		}
		if early := runs[0].run.SlotTime.Sub(runs[0].started); early > 0 {
			t.Errorf("slot %s started %v early on %s", slot, early, runs[0].run.Replica)
		}
	}
	if stepped.early.Load() == 0 {
		t.Fatal("the stepped replica made no early claim: the test did not test the store's clock")
	}
	t.Logf("the stepped replica's claims refused as early: %d", stepped.early.Load())
}

// zkCounter counts the claims made through a store, keeping every
// capability of the store it embeds (the fleet, and WatchClaims).
type zkCounter struct {
	*zklock.Store
	n *atomic.Int64
}

func (c zkCounter) Claim(ctx context.Context, slot lock.Slot, replica string, p lock.Policy) (lock.Claim, error) {
	c.n.Add(1)
	return c.Store.Claim(ctx, slot, replica, p)
}

func (c zkCounter) ClaimMany(ctx context.Context, reqs []lock.ClaimRequest, f func(int, lock.ClaimReply)) {
	c.n.Add(int64(len(reqs)))
	c.Store.ClaimMany(ctx, reqs, f)
}

// On ZooKeeper (3 nodes), three replicas claim each slot about once: the
// deferring replicas hear the preferred claimant's claim from their run
// node watches, though the claimant's own watch is armed only by its
// claims (WatchClaims).
func TestZooKeeperPreferredClaimantClaimsAlone(t *testing.T) {
	testlane.Parallel(t, heavyLane)
	var claims atomic.Int64
	var stores []lock.Store
	for _, s := range zkStores(t, 3, 10*time.Second) {
		stores = append(stores, zkCounter{s.(*zklock.Store), &claims})
	}
	preferredClaimsAlone(t, stores, &claims)
}
