package scheduler_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/testlane"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/memlock"
	"github.com/slotd/slotd/scheduler"
	"github.com/slotd/slotd/scheduler/schedule"
)

// jitterTolerance is how far before its jittered start an attempt may be
// seen to start: the fire time is on the store's clock, which the replica
// estimates to a few milliseconds, and the ledger reads the local clock.
const jitterTolerance = 50 * time.Millisecond

// With jitter, three replicas on one Redis run every slot once, each at
// the same hashed delay after its slot time whichever replica wins it, and
// the slot keeps its scheduled time: id, token and slot time.
func TestJitterDelaysEverySlotAlikeAcrossReplicas(t *testing.T) {
	testlane.Parallel(t, lightLane)
	stores := redisStores(t, 3)
	testJitter(t, stores)
}

func TestJitterOnTheEmbeddedStore(t *testing.T) {
	testlane.Parallel(t, lightLane)
	testJitter(t, []lock.Store{memlock.New(nil)})
}

func testJitter(t *testing.T, stores []lock.Store) {
	l := newLedger()
	task := testTask(t, "spread", "@every 2s", l.job(ok), func(t *scheduler.Task) { t.Jitter = 1500 * time.Millisecond })
	for i, s := range stores {
		startReplica(t, fmt.Sprintf("r%d", i), s, time.Second, []scheduler.Task{task})
	}
	rs := l.await(t, "5 completed slots", 30*time.Second, func(rs []record) bool {
		n := 0
		for _, r := range rs {
			if r.done {
				n++
			}
		}
		return n >= 5
	})
	delays := map[time.Duration]bool{}
	winners := map[string]bool{}
	for slot, runs := range bySlot(rs) {
		if len(runs) != 1 {
			t.Errorf("slot %s ran %d times:\n%s", slot, len(runs), dump(runs))
			continue
		}
		r := runs[0]
		delay := task.StartDelay(r.run.SlotTime)
		delays[delay] = true
		winners[r.run.Replica] = true
		if delay < 0 || delay >= task.Jitter {
			t.Errorf("slot %s: delay %v outside [0, %v)", slot, delay, task.Jitter)
		}
		start := r.run.SlotTime.Add(delay)
		if r.started.Before(start.Add(-jitterTolerance)) {
			t.Errorf("slot %s started %v before its jittered start (delay %v)", slot, start.Sub(r.started), delay)
		}
		if late := r.started.Sub(start); late > time.Second {
			t.Errorf("slot %s started %v after its jittered start: the delay was not what fired it", slot, late)
		}
		if r.run.Slot != task.Schedule.SlotID(r.run.SlotTime) || r.run.Token != lock.Token(r.run.SlotTime, 1) || r.run.SlotTime.Nanosecond() != 0 {
			t.Errorf("slot %s: id %s, token %d, time %v: want the scheduled slot's", slot, r.run.Slot, r.run.Token, r.run.SlotTime)
		}
	}
	if len(delays) < 2 {
		t.Errorf("every slot got the same delay %v: no spread", delays)
	}
	t.Logf("winners %v, distinct delays %d", winners, len(delays))
}

// StartDelay depends only on the task's name and the slot, stays below
// the jitter, is zero without it, and spreads the slots of one task and
// the tasks of one slot.
func TestStartDelay(t *testing.T) {
	s, err := schedule.Parse("@every 1m", "")
	if err != nil {
		t.Fatal(err)
	}
	mk := func(name string, jitter time.Duration) *scheduler.Task {
		return &scheduler.Task{Name: name, Schedule: s, Jitter: jitter}
	}
	at := time.Date(2024, 1, 15, 14, 30, 0, 0, time.UTC)
	if d := mk("a", 0).StartDelay(at); d != 0 {
		t.Errorf("no jitter: delay %v", d)
	}
	a := mk("a", 30*time.Second)
	if a.StartDelay(at) != mk("a", 30*time.Second).StartDelay(at) {
		t.Error("two copies of a task disagree")
	}
	var sum time.Duration
	seen := map[time.Duration]bool{}
	for i := range 1000 {
		slotDelay := a.StartDelay(at.Add(time.Duration(i) * time.Minute))
		taskDelay := mk(fmt.Sprintf("task-%d", i), 30*time.Second).StartDelay(at)
		for _, d := range []time.Duration{slotDelay, taskDelay} {
			if d < 0 || d >= 30*time.Second || d%time.Millisecond != 0 {
				t.Fatalf("delay %v: want whole ms in [0, 30s)", d)
			}
			sum += d
			seen[d] = true
		}
	}
	if mean := sum / 2000; mean < 12*time.Second || mean > 18*time.Second || len(seen) < 1500 {
		t.Errorf("mean delay %v, %d distinct of 2000: not spread over [0, 30s)", mean, len(seen))
	}
}
