package scheduler_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/slotd/slotd/internal/etcdtest"
	"github.com/slotd/slotd/internal/testlane"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/etcdlock"
	"github.com/slotd/slotd/scheduler"
)

// etcdStores are n stores, each on a client of its own, on one 3-member
// etcd cluster.
func etcdStores(t *testing.T, n int) []lock.Store {
	c := etcdtest.Start(t, 3)
	var out []lock.Store
	for range n {
		cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		s := etcdlock.New(cli, "slotd")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = s.Subscribe(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close(); cli.Close() })
		out = append(out, s)
	}
	return out
}

// On etcd, whose store clock is a member's Date header carried on the
// monotonic clock, replicas with clocks three minutes ahead and behind
// never start a slot before its time, and never run one twice.
func TestEtcdSkewedClocksRunNothingEarly(t *testing.T) {
	testlane.Parallel(t, etcdLane)
	stores := etcdStores(t, 3)
	l := newLedger()
	task := testTask(t, "skew", "@every 1s", l.job(ok), nil)
	skews := []time.Duration{3 * time.Minute, -3 * time.Minute, 0}
	var reps []*replica
	for i, s := range stores {
		reps = append(reps, startReplica(t, fmt.Sprintf("r%d", i), s, time.Second, []scheduler.Task{task},
			scheduler.WithClock(offsetClock{skews[i]})))
	}
	rs := l.await(t, "4 slots", 20*time.Second, func(rs []record) bool { return len(rs) >= 4 })
	for slot, runs := range bySlot(rs) {
		if len(runs) != 1 {
			t.Errorf("slot %s ran %d times", slot, len(runs))
		}
		// The test's clock is the members': both are this machine's.
		if early := runs[0].run.SlotTime.Sub(runs[0].started); early > 0 {
			t.Errorf("slot %s started %v early on %s", slot, early, runs[0].run.Replica)
		}
		if runs[0].run.Revision <= 0 {
			t.Errorf("slot %s ran without the claim's etcd revision", slot)
		}
	}
	for i, r := range reps {
		_, skew := r.sched.Healthy()
		if want := -skews[i]; (skew - want).Abs() > time.Second {
			t.Errorf("replica %s measured skew %v, want about %v", r.name, skew, want)
		}
	}
}
