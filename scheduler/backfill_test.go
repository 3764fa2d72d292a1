package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/memlock"
	"github.com/slotd/slotd/scheduler"
	"github.com/slotd/slotd/scheduler/history"
	"github.com/slotd/slotd/tasks"
)

// backfill asks r's scheduler for a backfill once its loop runs.
func backfill(t *testing.T, r *replica, task string, from, to time.Time) (scheduler.BackfillPlan, error) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		plan, err := r.sched.Backfill(context.Background(), task, from, to)
		if !errors.Is(err, scheduler.ErrNotRunning) || time.Now().After(deadline) {
			return plan, err
		}
	}
}

// markDone runs task's slot at at to done in store, as a past success.
func markDone(t *testing.T, store lock.Store, task scheduler.Task, at time.Time) {
	t.Helper()
	ctx := context.Background()
	slot := task.Slot(at)
	slot.Deadline = time.Now().Add(time.Hour)
	c, err := store.Claim(ctx, slot, "earlier#0", task.Policy)
	if err != nil || c.Result != lock.Won {
		t.Fatalf("claim %s: %+v, %v", slot, c, err)
	}
	if err := store.Complete(ctx, slot, lock.Owner{ID: "earlier#0", Attempt: c.Attempt}, task.DoneTTL); err != nil {
		t.Fatal(err)
	}
}

// awaitBackfilled waits until no backfill slot of task is left on any of rs.
func awaitBackfilled(t *testing.T, task string, rs ...*replica) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		left := int64(0)
		for _, r := range rs {
			left += r.sched.Stats().Task(task).BackfillLeft.Load()
		}
		if left == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d backfill slots of %s still pending after 20s", left, task)
		}
	}
}

// The same backfill sent to each of three replicas on one Redis at once
// runs every slot of the range once, as attempt 1 with its scheduled
// slot's id and token, and not the two slots done before; the history
// says backfilled.
func TestBackfillRunsEachSlotOnceAcrossReplicas(t *testing.T) {
	stores := redisStores(t, 3)
	l := newLedger()
	task := testTask(t, "hourly", "0 * * * *", l.job(ok), nil)
	to := time.Now().UTC().Truncate(time.Hour)
	from := to.Add(-6 * time.Hour)
	done := map[string]bool{}
	for _, at := range []time.Time{from.Add(time.Hour), from.Add(4 * time.Hour)} {
		markDone(t, stores[0], task, at)
		done[task.Schedule.SlotID(at)] = true
	}
	hist := history.NewMemory(100)
	var reps []*replica
	for i, s := range stores {
		reps = append(reps, startReplica(t, fmt.Sprintf("r%d", i), s, time.Second, []scheduler.Task{task}, scheduler.WithHistory(hist)))
	}
	var wg sync.WaitGroup
	for _, r := range reps {
		wg.Go(func() {
			plan, err := backfill(t, r, "hourly", from, to)
			if err != nil || plan.Slots != 6 || plan.First != task.Schedule.SlotID(from) || plan.Last != task.Schedule.SlotID(to.Add(-time.Hour)) {
				t.Errorf("%s: backfill = %+v, %v; want 6 slots from %s", r.name, plan, err, from)
			}
		})
	}
	wg.Wait()
	awaitBackfilled(t, "hourly", reps...)
	rs := l.snapshot()
	if len(rs) != 4 {
		t.Fatalf("%d runs, want 4 (6 slots, 2 done before):\n%s", len(rs), dump(rs))
	}
	for slot, runs := range bySlot(rs) {
		r := runs[0].run
		switch {
		case len(runs) != 1:
			t.Errorf("slot %s ran %d times:\n%s", slot, len(runs), dump(runs))
		case done[slot]:
			t.Errorf("slot %s was done before the backfill and ran again", slot)
		case r.Attempt != 1 || r.Token != lock.Token(r.SlotTime, 1) || task.Schedule.SlotID(r.SlotTime) != slot:
			t.Errorf("slot %s: ran %+v; want attempt 1 of the scheduled slot, token %d", slot, r, lock.Token(r.SlotTime, 1))
		case r.SlotTime.Before(from) || !r.SlotTime.Before(to):
			t.Errorf("slot %s at %v: outside [%v, %v)", slot, r.SlotTime, from, to)
		}
	}
	es, err := hist.Recent(context.Background(), "hourly", 10)
	if err != nil || len(es) != 4 {
		t.Fatalf("history: %d entries, %v; want 4", len(es), err)
	}
	for _, e := range es {
		if !e.Backfilled || e.Outcome != "success" {
			t.Errorf("history entry %+v: want a backfilled success", e)
		}
	}
	var admitted float64
	for _, r := range reps {
		admitted += value(t, r.sched, "slotd_slots_backfilled_total", "hourly", "")
	}
	if admitted != 18 {
		t.Errorf("slotd_slots_backfilled_total summed over the replicas = %v, want 18 (6 each)", admitted)
	}
}

// On the embedded store, a backfill runs its slots oldest first (one at a
// time under concurrency = "forbid"), retries a failed slot within its new
// window, and a second backfill of the range runs nothing.
func TestBackfillOldestFirstOnEmbeddedStore(t *testing.T) {
	store := memlock.New(nil)
	l := newLedger()
	var once sync.Once
	job := l.job(func(_ context.Context, r tasks.Run) error {
		var err error
		once.Do(func() { err = errors.New("first attempt fails") })
		return err
	})
	task := testTask(t, "quarter", "*/15 * * * *", job, func(t *scheduler.Task) { t.Concurrency = scheduler.ConcurrencyForbid })
	to := time.Now().UTC().Truncate(15 * time.Minute)
	from := to.Add(-2 * time.Hour)
	r := startReplica(t, "solo", store, time.Second, []scheduler.Task{task}, scheduler.WithHandoff(time.Millisecond))
	if plan, err := backfill(t, r, "quarter", from, to); err != nil || plan.Slots != 8 || plan.InFlight != 1 {
		t.Fatalf("backfill = %+v, %v; want 8 slots, 1 at once", plan, err)
	}
	awaitBackfilled(t, "quarter", r)
	rs := l.snapshot()
	if len(rs) != 9 {
		t.Fatalf("%d runs, want 9 (8 slots, the first retried once):\n%s", len(rs), dump(rs))
	}
	if rs[0].run.Slot != rs[1].run.Slot || rs[1].run.Attempt != 2 {
		t.Errorf("the failed first slot was not retried next as attempt 2:\n%s", dump(rs))
	}
	for i := 2; i < len(rs); i++ {
		if !rs[i].run.SlotTime.After(rs[i-1].run.SlotTime) {
			t.Errorf("run %d (slot %s) not after run %d (slot %s): not oldest first", i, rs[i].run.Slot, i-1, rs[i-1].run.Slot)
		}
	}
	if plan, err := backfill(t, r, "quarter", from, to); err != nil || plan.Slots != 8 {
		t.Fatalf("second backfill = %+v, %v", plan, err)
	}
	awaitBackfilled(t, "quarter", r)
	if n := len(l.snapshot()); n != 9 {
		t.Errorf("the second backfill of the range ran %d slots, want none:\n%s", n-9, dump(l.snapshot()))
	}
}

// Bad requests are refused with an error naming the value at fault.
func TestBackfillRefusals(t *testing.T) {
	store := memlock.New(nil)
	hourly := testTask(t, "hourly", "0 * * * *", tasks.TaskFunc(func(context.Context) error { return nil }), nil)
	secs := testTask(t, "secs", "* * * * * *", tasks.TaskFunc(func(context.Context) error { return nil }), nil)
	repl := testTask(t, "repl", "0 * * * *", tasks.TaskFunc(func(context.Context) error { return nil }),
		func(t *scheduler.Task) { t.Concurrency = scheduler.ConcurrencyReplace })
	r := startReplica(t, "solo", store, time.Second, []scheduler.Task{hourly, secs, repl})
	now := time.Now().UTC().Truncate(time.Hour)
	for _, c := range []struct {
		name, task string
		from, to   time.Time
		is         error
		says       []string
	}{
		{"from after to", "hourly", now, now.Add(-time.Hour), scheduler.ErrBackfillRange, []string{"from " + now.Format(time.RFC3339), "is not before to"}},
		{"in the future", "hourly", now.Add(-time.Hour), now.Add(2 * time.Hour), scheduler.ErrBackfillRange, []string{"to " + now.Add(2*time.Hour).Format(time.RFC3339), "in the future"}},
		{"unknown task", "nope", now.Add(-time.Hour), now, scheduler.ErrBackfillTask, []string{`"nope"`}},
		{"over the cap", "secs", now.Add(-2 * time.Hour), now, scheduler.ErrBackfillLimit, []string{"7200 slots", "at most 1000"}},
		{"far over the cap", "secs", now.Add(-48 * time.Hour), now, scheduler.ErrBackfillLimit, []string{"more than 100000 slots", "at most 1000"}},
		{"no slot", "hourly", now.Add(-30 * time.Minute), now.Add(-time.Minute), scheduler.ErrBackfillRange, []string{"has no slot"}},
		{"replace", "repl", now.Add(-time.Hour), now, scheduler.ErrBackfillTask, []string{"repl", `concurrency = "replace"`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := backfill(t, r, c.task, c.from, c.to)
			if !errors.Is(err, c.is) {
				t.Fatalf("err = %v, want %v", err, c.is)
			}
			for _, s := range c.says {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
		})
	}
}

// At most MaxBackfills backfills are under way on one replica; the next
// is refused until one finishes.
func TestBackfillsUnderWayAreCapped(t *testing.T) {
	store := memlock.New(nil)
	release := make(chan struct{})
	started := make(chan struct{}, 100)
	task := testTask(t, "slow", "0 * * * *", tasks.TaskFunc(func(ctx context.Context) error {
		started <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}), nil)
	r := startReplica(t, "solo", store, time.Second, []scheduler.Task{task})
	now := time.Now().UTC().Truncate(time.Hour)
	for i := range scheduler.MaxBackfills {
		to := now.Add(-time.Duration(i) * time.Hour)
		if _, err := backfill(t, r, "slow", to.Add(-time.Hour), to); err != nil {
			t.Fatalf("backfill %d: %v", i, err)
		}
	}
	_, err := backfill(t, r, "slow", now.Add(-48*time.Hour), now.Add(-47*time.Hour))
	if !errors.Is(err, scheduler.ErrBackfillBusy) || !strings.Contains(err.Error(), fmt.Sprint(scheduler.MaxBackfills)) {
		t.Fatalf("backfill beyond the cap: %v; want ErrBackfillBusy naming %d", err, scheduler.MaxBackfills)
	}
	for range scheduler.MaxBackfills {
		<-started
	}
	close(release)
	awaitBackfilled(t, "slow", r)
	if _, err := backfill(t, r, "slow", now.Add(-48*time.Hour), now.Add(-47*time.Hour)); err != nil {
		t.Fatalf("backfill once the others finished: %v", err)
	}
}

// A reload that leaves the task as it was lets its backfill go on; one
// that changes the task drops the slots not yet started (those running
// finish).
func TestBackfillAcrossReload(t *testing.T) {
	store := memlock.New(nil)
	l := newLedger()
	release := make(chan struct{})
	job := l.job(func(ctx context.Context, _ tasks.Run) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})
	task := testTask(t, "hourly", "0 * * * *", job, nil)
	other := testTask(t, "other", "0 0 1 1 *", tasks.TaskFunc(func(context.Context) error { return nil }), nil)
	r := startReplica(t, "solo", store, time.Second, []scheduler.Task{task})
	to := time.Now().UTC().Truncate(time.Hour)
	if _, err := backfill(t, r, "hourly", to.Add(-6*time.Hour), to); err != nil {
		t.Fatal(err)
	}
	l.await(t, "4 slots started", 10*time.Second, func(rs []record) bool { return len(rs) == scheduler.BackfillInFlight })
	if _, err := r.sched.Reload(context.Background(), []scheduler.Task{task, other}); err != nil {
		t.Fatal(err)
	}
	close(release)
	awaitBackfilled(t, "hourly", r)
	if n := len(l.snapshot()); n != 6 {
		t.Fatalf("across a reload that left the task as it was, %d of 6 slots ran:\n%s", n, dump(l.snapshot()))
	}

	release = make(chan struct{})
	if _, err := backfill(t, r, "hourly", to.Add(-12*time.Hour), to.Add(-6*time.Hour)); err != nil {
		t.Fatal(err)
	}
	l.await(t, "4 more slots started", 10*time.Second, func(rs []record) bool { return len(rs) == 6+scheduler.BackfillInFlight })
	changed := task
	changed.MaxAttempts = 5
	if _, err := r.sched.Reload(context.Background(), []scheduler.Task{changed}); err != nil {
		t.Fatal(err)
	}
	close(release)
	awaitBackfilled(t, "hourly", r)
	if n := len(l.snapshot()); n != 6+scheduler.BackfillInFlight {
		t.Fatalf("after a reload that changed the task, %d slots ran, want the %d running only:\n%s", n-6, scheduler.BackfillInFlight, dump(l.snapshot()))
	}
}
