package scheduler_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/slotd/slotd/internal/etcdtest"
	"github.com/slotd/slotd/internal/testlane"
	"github.com/slotd/slotd/internal/zktest"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/etcdlock"
	"github.com/slotd/slotd/lock/zklock"
	"github.com/slotd/slotd/scheduler"
)

// readyLag starts a replica on store with a clock check every minute (so
// that none falls by chance just after the loss; the default is 10 s),
// waits for it to be ready, runs lose (a quorum's loss) and returns how
// long the replica stays ready after it. Its one task is yearly: no claim
// fails meanwhile, as in a fleet between slots, so only the store checks
// can tell.
func readyLag(t *testing.T, store lock.Store, lose func()) time.Duration {
	t.Helper()
	task := testTask(t, "yearly", "0 0 1 1 *", newLedger().job(ok), nil)
	r := startReplica(t, "r1", store, time.Second, []scheduler.Task{task}, scheduler.WithClockCheck(time.Minute))
	_, probes := store.(lock.Prober)
	await(t, "the replica ready, its first store check done", 20*time.Second, func() bool {
		ok, _ := r.sched.Healthy()
		return ok && (!probes || !r.sched.Stats().Store.LastProbe().At.IsZero())
	})
	// On a store with a fleet, the replica announces itself and records
	// the first start after its first check and before its pings begin:
	// a loss in that window is seen only once both time out (up to 4 s).
	// Measure the replica running, as the test's fleet between slots is.
	if f, ok := store.(lock.Fleet); ok {
		await(t, "the fleet's first start recorded", 20*time.Second, func() bool {
			at, err := f.FirstStart(context.Background())
			return err == nil && !at.IsZero()
		})
	}
	lose()
	lost := time.Now()
	await(t, "the replica unready", 20*time.Second, func() bool { ok, _ := r.sched.Healthy(); return !ok })
	return time.Since(lost)
}

// Issue 26 item 13: readiness lagged an etcd quorum's loss by 6–10 s (the
// clock check's period, then its timeout). A ping through the quorum
// every 500 ms ping makes it at most 2 s.
func TestEtcdReadinessFollowsQuorumLoss(t *testing.T) {
	testlane.Parallel(t, etcdLane)
	c := etcdtest.Start(t, 3)
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	store := etcdlock.New(cli, "slotd")
	t.Cleanup(func() { store.Close(); cli.Close() })
	lag := readyLag(t, store, func() {
		c.Members[1].Stop()
		c.Members[2].Stop()
	})
	t.Logf("unready %v after the quorum was lost", lag)
	if lag > 2*time.Second {
		t.Errorf("unready %v after the quorum was lost; want at most 2s", lag)
	}
}

// The same on ZooKeeper.
func TestZooKeeperReadinessFollowsQuorumLoss(t *testing.T) {
	zktest.WithoutRace(t) // it stops two members under a watching session
	e := zktest.Start(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	store, err := zklock.Dial(ctx, zklock.Options{Servers: e.Servers(), SessionTimeout: 10 * time.Second})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	lag := readyLag(t, store, func() {
		e.Members[1].Stop()
		e.Members[2].Stop()
	})
	t.Logf("unready %v after the quorum was lost", lag)
	if lag > 2*time.Second {
		t.Errorf("unready %v after the quorum was lost; want at most 2s", lag)
	}
}
