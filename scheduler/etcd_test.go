package scheduler_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/etcdtest"
	"github.com/slotd/slotd/internal/testlane"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/scheduler"
)

// etcdStores are n stores, each on a client of its own, on the package's
// shared 3-member etcd cluster, under a prefix of the test's own.
func etcdStores(t *testing.T, n int) []lock.Store {
	t.Helper()
	return etcdConsensus(t, etcdtest.Shared(t, 3), sharedPrefix(), n).stores
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
