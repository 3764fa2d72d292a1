package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/testlane"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/memlock"
	"github.com/slotd/slotd/scheduler"
)

// reloadOnce reloads ts into sched and fails the test on an error.
func reloadOnce(t *testing.T, sched *scheduler.Scheduler, ts ...scheduler.Task) scheduler.Change {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := sched.Reload(ctx, ts)
	if err != nil {
		t.Fatalf("reload: %v", err)
	}
	return c
}

// ranSince reports the records of rs whose slot time is after at.
func ranSince(rs []record, at time.Time) []record {
	var out []record
	for _, r := range rs {
		if r.run.SlotTime.After(at) {
			out = append(out, r)
		}
	}
	return out
}

// checkEverySlotOnce fails unless rs holds each one-second slot from the
// first to the last exactly once.
func checkEverySlotOnce(t *testing.T, task string, rs []record) {
	t.Helper()
	if len(rs) == 0 {
		t.Fatalf("task %s never ran", task)
	}
	seen := map[time.Time]int{}
	first, last := rs[0].run.SlotTime, rs[0].run.SlotTime
	for _, r := range rs {
		seen[r.run.SlotTime]++
		if r.run.SlotTime.Before(first) {
			first = r.run.SlotTime
		}
		if r.run.SlotTime.After(last) {
			last = r.run.SlotTime
		}
	}
	for at := first; !at.After(last); at = at.Add(time.Second) {
		if n := seen[at]; n != 1 {
			t.Errorf("task %s: slot %s ran %d times, want once", task, at.Format(time.TimeOnly), n)
		}
	}
}

// A reload adds a task, which starts at its next fire time; changes one,
// which takes its new definition from its next slot; and removes one,
// which claims nothing more. The unchanged task loses and doubles no slot.
func TestReloadAddsChangesAndRemovesTasks(t *testing.T) {
	testlane.Parallel(t, lightLane)
	kept, oldJob, newJob := newLedger(), newLedger(), newLedger()
	every := func(d *scheduler.Task) { d.Deadline = 10 * time.Second }
	tick := func() scheduler.Task { return testTask(t, "tick", "@every 1s", kept.job(ok), every) }
	r := startReplica(t, "r0", memlock.New(time.Now), time.Second, []scheduler.Task{tick()})
	kept.await(t, "a first tick", 10*time.Second, func(rs []record) bool { return len(rs) > 0 })

	addedAt := time.Now()
	c := reloadOnce(t, r.sched, tick(), testTask(t, "other", "@every 1s", oldJob.job(ok), every))
	if fmt.Sprint(c) != "{[other] [] []}" {
		t.Errorf("first reload's change: %+v, want other added", c)
	}
	oldJob.await(t, "the added task's first run", 10*time.Second, func(rs []record) bool { return len(rs) > 0 })
	for _, rec := range oldJob.snapshot() {
		if !rec.run.SlotTime.After(addedAt) {
			t.Errorf("added task ran slot %s, from before the reload at %s: added tasks are not caught up",
				rec.run.Slot, addedAt.Format(time.StampMilli))
		}
	}

	changedAt := time.Now()
	c = reloadOnce(t, r.sched, tick(), testTask(t, "other", "@every 1s", newJob.job(ok), func(d *scheduler.Task) {
		every(d)
		d.Params = map[string]any{"version": int64(2)}
	}))
	if fmt.Sprint(c) != "{[] [] [other]}" {
		t.Errorf("second reload's change: %+v, want other changed", c)
	}
	newJob.await(t, "the changed task's first run", 10*time.Second, func(rs []record) bool { return len(rs) > 0 })
	if late := ranSince(oldJob.snapshot(), changedAt); len(late) > 0 {
		t.Errorf("the old definition ran slots after the reload:\n%s", dump(late))
	}
	if early := slices.DeleteFunc(newJob.snapshot(), func(rec record) bool { return rec.run.SlotTime.After(changedAt) }); len(early) > 0 {
		t.Errorf("the new definition ran slots from before the reload:\n%s", dump(early))
	}

	removedAt := time.Now()
	c = reloadOnce(t, r.sched, tick())
	if fmt.Sprint(c) != "{[] [other] []}" {
		t.Errorf("third reload's change: %+v, want other removed", c)
	}
	// Two more ticks after the removal: the removed task had its chances.
	kept.await(t, "two ticks after the removal", 10*time.Second, func(rs []record) bool {
		return len(ranSince(rs, removedAt.Add(time.Second))) >= 2
	})
	if late := ranSince(newJob.snapshot(), removedAt); len(late) > 0 {
		t.Errorf("the removed task ran slots after the reload:\n%s", dump(late))
	}
	if c := reloadOnce(t, r.sched, tick()); !c.Empty() {
		t.Errorf("a reload of the same tasks changed %+v", c)
	}
	r.stop()
	checkEverySlotOnce(t, "tick", kept.snapshot())
	if _, err := r.sched.Reload(context.Background(), []scheduler.Task{tick()}); !errors.Is(err, scheduler.ErrStopped) {
		t.Errorf("reload after Run returned: %v, want ErrStopped", err)
	}
}

// Reloading every replica of three, over and over, while they race for an
// unchanged every-second task, neither loses nor doubles any of its slots;
// the task that comes and goes with the reloads runs each of its slots at
// most once.
func TestReloadChurnKeepsEverySlotOnce(t *testing.T) {
	testlane.Parallel(t, lightLane)
	stores := redisStores(t, 3)
	kept, churn := newLedger(), newLedger()
	every := func(d *scheduler.Task) { d.Deadline = 10 * time.Second }
	tick := func() scheduler.Task { return testTask(t, "tick", "@every 1s", kept.job(ok), every) }
	var reps []*replica
	for i, s := range stores {
		reps = append(reps, startReplica(t, fmt.Sprintf("r%d", i), s, time.Second, []scheduler.Task{tick()}))
	}
	kept.await(t, "a first tick", 10*time.Second, func(rs []record) bool { return len(rs) > 0 })
	start := time.Now()
	for n := 0; time.Since(start) < 6*time.Second; n++ {
		ts := []scheduler.Task{tick()}
		switch n % 3 {
		case 0:
			ts = append(ts, testTask(t, "churn", "@every 1s", churn.job(ok), every))
		case 1:
			ts = append(ts, testTask(t, "churn", "@every 1s", churn.job(ok), func(d *scheduler.Task) {
				every(d)
				d.Params = map[string]any{"n": int64(n)}
			}))
		}
		var wg sync.WaitGroup
		for _, r := range reps {
			wg.Add(1)
			go func() {
				defer wg.Done()
				reloadOnce(t, r.sched, ts...)
			}()
		}
		wg.Wait()
		time.Sleep(150 * time.Millisecond) // the pace of the reloads, not a wait for an event
	}
	kept.await(t, "two ticks after the reloads", 10*time.Second, func(rs []record) bool {
		return len(ranSince(rs, time.Now().Add(-time.Second))) >= 1
	})
	for _, r := range reps {
		r.stop()
	}
	rs := kept.snapshot()
	checkEverySlotOnce(t, "tick", rs)
	if got := len(ranSince(rs, start)); got < 5 {
		t.Errorf("only %d ticks in the 6 s of reloads", got)
	}
	for slot, runs := range bySlot(churn.snapshot()) {
		if len(runs) != 1 {
			t.Errorf("churn slot %s ran %d times:\n%s", slot, len(runs), dump(runs))
		}
	}
}

// A reload keeps the operator's controls: a paused task stays paused
// (changed or not), an added task configured paused = true starts paused,
// and the added task hears its triggers and its resume.
func TestReloadKeepsControls(t *testing.T) {
	testlane.Parallel(t, lightLane)
	store := memlock.New(nil)
	ctx := context.Background()
	a, b := newLedger(), newLedger()
	taskA := testTask(t, "a", "@every 1s", a.job(ok), nil)
	r := startReplica(t, "r1", store, time.Second, []scheduler.Task{taskA}, scheduler.WithClockCheck(200*time.Millisecond))
	if _, err := store.SetPaused(ctx, "a", lock.Pause); err != nil {
		t.Fatal(err)
	}
	await(t, "a skipped slot of a", 10*time.Second, func() bool { return skipped(r, "a") >= 1 })
	ranA := len(a.snapshot())

	changedA := testTask(t, "a", "@every 1s", a.job(ok), func(d *scheduler.Task) { d.Params = map[string]any{"v": int64(2)} })
	taskB := testTask(t, "b", "@every 1s", b.job(ok), func(d *scheduler.Task) { d.Paused = true })
	c := reloadOnce(t, r.sched, changedA, taskB)
	if fmt.Sprint(c) != "{[b] [] [a]}" {
		t.Errorf("change %+v, want b added and a changed", c)
	}
	skippedA := skipped(r, "a")
	await(t, "two more skipped slots of a, and two of b", 10*time.Second, func() bool {
		return skipped(r, "a") >= skippedA+2 && skipped(r, "b") >= 2
	})
	if n := len(a.snapshot()); n != ranA {
		t.Errorf("the paused task ran %d slots across the reload", n-ranA)
	}
	if rs := b.snapshot(); len(rs) != 0 {
		t.Fatalf("the added task configured paused ran:\n%s", dump(rs))
	}
	trig, err := store.Trigger(ctx, "b", "after-reload", taskB.Window())
	if err != nil || trig.Result != lock.Started {
		t.Fatalf("trigger of the added task = %+v, %v", trig, err)
	}
	b.await(t, "the added task's triggered run", 10*time.Second, func(rs []record) bool { return len(rs) == 1 && rs[0].done })
	if _, err := store.SetPaused(ctx, "a", lock.Resume); err != nil {
		t.Fatal(err)
	}
	a.await(t, "a run of a after its resume", 10*time.Second, func(rs []record) bool { return len(rs) > ranA })
}
