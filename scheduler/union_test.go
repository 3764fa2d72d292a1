package scheduler_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/testlane"
	"github.com/slotd/slotd/scheduler"
	"github.com/slotd/slotd/scheduler/schedule"
)

// A task on two schedules whose fires meet (every 2 s and every 3 s meet
// every 6 s) runs each fire of the union once, the meeting ones once, each
// under its own slot id; active_until ends its fires.
func TestUnionOfSchedulesRunsEachFireOnce(t *testing.T) {
	testlane.Parallel(t, lightLane)
	stores := redisStores(t, 3)
	l := newLedger()
	var parts []*schedule.Schedule
	for _, sp := range []string{"@every 2s", "@every 3s"} {
		s, err := schedule.Parse(sp, "")
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, s)
	}
	first := parts[0].Next(time.Now().Add(time.Second))
	// 6 s hold one meeting of the two (they meet every 6 s): enough to
	// show it runs once, and the fires of each part around it.
	until := first.Add(6 * time.Second)
	union, err := schedule.Combine(parts, schedule.Bounds{Until: until})
	if err != nil {
		t.Fatal(err)
	}
	task := testTask(t, "both", "@every 2s", l.job(ok), func(t *scheduler.Task) { t.Spec, t.Schedule = "@every 2s; @every 3s", union })
	// A second task is the barrier: once its slot 3 s past until has run,
	// any fire of the union after until would have too.
	barrier := testTask(t, "barrier", "@every 1s", l.job(ok), nil)
	for i, s := range stores {
		startReplica(t, fmt.Sprintf("r%d", i), s, time.Second, []scheduler.Task{task, barrier})
	}
	var want []time.Time
	for at := union.Next(first.Add(-time.Second)); !at.IsZero(); at = union.Next(at) {
		want = append(want, at)
	}
	rs := l.await(t, "the barrier's slot 3 s after active_until", 40*time.Second, func(rs []record) bool {
		for _, r := range rs {
			if r.done && r.run.Task == "barrier" && !r.run.SlotTime.Before(until.Add(3*time.Second)) {
				return true
			}
		}
		return false
	})
	var mine []record
	for _, r := range rs {
		if r.run.Task == "both" && !r.run.SlotTime.Before(first) {
			mine = append(mine, r)
		}
	}
	got := map[time.Time]int{}
	for slot, runs := range bySlot(mine) {
		if len(runs) != 1 {
			t.Errorf("slot %s ran %d times", slot, len(runs))
		}
		if runs[0].run.SlotTime.After(until) {
			t.Errorf("slot %s after active_until %v", slot, until)
		}
		got[runs[0].run.SlotTime]++
	}
	for _, at := range want {
		if got[at] != 1 {
			t.Errorf("fire %v ran %d times", at, got[at])
		}
	}
	meetings := 0
	for _, at := range want {
		if parts[0].Next(at.Add(-time.Second)).Equal(at) && parts[1].Next(at.Add(-time.Second)).Equal(at) {
			meetings++
		}
	}
	if len(want) < 4 || meetings == 0 {
		t.Errorf("the union fired %d times in 6 s, %d of them meetings of both parts: %v", len(want), meetings, want)
	}
}
