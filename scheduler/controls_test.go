package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/internal/stats"
	"github.com/slotd/slotd/internal/testlane"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/memlock"
	"github.com/slotd/slotd/lock/redislock"
	"github.com/slotd/slotd/scheduler"
	"github.com/slotd/slotd/scheduler/history"
	"github.com/slotd/slotd/tasks"
)

// await polls cond until it holds, or fails the test after timeout.
func await(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func controls(t *testing.T, s lock.Store) lock.Controls {
	t.Helper()
	c, ok := s.(lock.Controls)
	if !ok {
		t.Fatalf("%T has no operator controls", s)
	}
	return c
}

// A trigger runs once fleet-wide, as a slot of its own whose counter (and
// tokens) start after lock.TriggerBase, its attempts shown from 1; the same idempotency key
// starts no second run, a new key (sent to every replica at once) one more.
func TestTriggerRunsOnceAcrossReplicas(t *testing.T) {
	stores := redisStores(t, 3)
	l := newLedger()
	// A yearly task with a short window: no scheduled slot fires meanwhile.
	task := testTask(t, "report", "0 0 1 1 *", l.job(ok), func(t *scheduler.Task) { t.Deadline = 10 * time.Minute })
	for i, s := range stores {
		startReplica(t, fmt.Sprintf("r%d", i), s, time.Second, []scheduler.Task{task}, scheduler.WithClockCheck(200*time.Millisecond))
	}
	ctx := context.Background()
	c := controls(t, stores[0])
	first, err := c.Trigger(ctx, task.Name, "deploy-1", task.Window())
	if err != nil || first.Result != lock.Started {
		t.Fatalf("trigger = %+v, %v", first, err)
	}
	slot := task.TriggerSlot(first.Time)
	rs := l.await(t, "the triggered run", 10*time.Second, func(rs []record) bool { return len(rs) == 1 && rs[0].done })
	if r := rs[0].run; r.Slot != slot.ID || r.Attempt != 1 || r.Token != lock.Token(slot.Time, lock.TriggerBase+1) {
		t.Fatalf("triggered run %+v, want slot %s attempt 1, token %d", r, slot.ID, lock.Token(slot.Time, lock.TriggerBase+1))
	}
	// The same key, from every replica at once: nothing new.
	var wg sync.WaitGroup
	for _, s := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if again, err := controls(t, s).Trigger(ctx, task.Name, "deploy-1", task.Window()); err != nil || again.Result != lock.Repeated {
				t.Errorf("repeated trigger = %+v, %v", again, err)
			}
		}()
	}
	wg.Wait()
	// A new key in a later second, sent to every replica at once: one run.
	await(t, "the store's clock past the first trigger's second", 5*time.Second, func() bool {
		now, err := stores[0].Time(ctx)
		return err == nil && now.Truncate(time.Second).After(first.Time)
	})
	results := make(chan lock.Trigger, len(stores))
	for _, s := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tr, err := controls(t, s).Trigger(ctx, task.Name, "deploy-2", task.Window())
			if err != nil {
				t.Error(err)
			}
			results <- tr
		}()
	}
	wg.Wait()
	close(results)
	started := 0
	var second lock.Trigger
	for tr := range results {
		if tr.Result == lock.Started {
			started++
			second = tr
		}
	}
	if started != 1 {
		t.Fatalf("%d of 3 concurrent requests with one key started a trigger, want 1", started)
	}
	l.await(t, "the second triggered run", 10*time.Second, func(rs []record) bool { return len(rs) == 2 && rs[1].done })
	for _, at := range []time.Time{first.Time, second.Time} {
		// The task has returned; its slot is marked done just after.
		var st lock.State
		await(t, fmt.Sprintf("trigger at %v marked done", at), 5*time.Second, func() bool {
			st, _ = lock.ReadState(ctx, stores[0], task.TriggerSlot(at))
			return st.Status == "done"
		})
		if st.Attempts != lock.TriggerBase+1 {
			t.Errorf("trigger at %v: state %+v; want done after one attempt", at, st)
		}
	}
	if rs := l.snapshot(); len(rs) != 2 {
		t.Fatalf("%d runs, want 2:\n%s", len(rs), dump(rs))
	}
}

func skipped(r *replica, task string) uint64 {
	return r.sched.Stats().Task(task).Skipped[0].Load()
}

// A pause stops claims on every replica, holds across a restart of them
// all, and a resume makes the next fire time run again.
func TestPauseHoldsAcrossRestart(t *testing.T) {
	testlane.Parallel(t, lightLane)
	pauseHoldsAcrossRestart(t, redisStores(t, 3))
}

func pauseHoldsAcrossRestart(t *testing.T, stores []lock.Store) {
	l := newLedger()
	task := testTask(t, "tick", "@every 1s", l.job(ok), nil)
	start := func() []*replica {
		var rs []*replica
		for i, s := range stores {
			rs = append(rs, startReplica(t, fmt.Sprintf("r%d", i), s, time.Second, []scheduler.Task{task}, scheduler.WithClockCheck(200*time.Millisecond)))
		}
		return rs
	}
	reps := start()
	l.await(t, "a run before the pause", 10*time.Second, func(rs []record) bool { return len(rs) > 0 })
	ctx := context.Background()
	if p, err := controls(t, stores[1]).SetPaused(ctx, task.Name, lock.Pause); err != nil || !p {
		t.Fatalf("pause = %v, %v", p, err)
	}
	allSkipped := func(reps []*replica, n uint64) func() bool {
		return func() bool {
			for _, r := range reps {
				if !r.sched.Stats().Task(task.Name).Paused.Load() || skipped(r, task.Name) < n {
					return false
				}
			}
			return true
		}
	}
	await(t, "every replica skipping a slot", 10*time.Second, allSkipped(reps, 1))
	l.await(t, "runs under way to end", 10*time.Second, func(rs []record) bool {
		for _, r := range rs {
			if !r.done {
				return false
			}
		}
		return true
	})
	before := len(l.snapshot())
	await(t, "every replica skipping two more slots", 10*time.Second, allSkipped(reps, 3))
	for _, r := range reps {
		r.stop()
	}
	reps = start()
	await(t, "every restarted replica skipping two slots", 10*time.Second, allSkipped(reps, 2))
	if rs := l.snapshot(); len(rs) != before {
		t.Fatalf("%d runs while paused:\n%s", len(rs)-before, dump(rs[before:]))
	}
	resumed := time.Now()
	if p, err := controls(t, stores[2]).SetPaused(ctx, task.Name, lock.Resume); err != nil || p {
		t.Fatalf("resume = %v, %v", p, err)
	}
	rs := l.await(t, "a run after the resume", 10*time.Second, func(rs []record) bool { return len(rs) > before })
	for _, r := range rs[before:] {
		if r.run.SlotTime.Before(resumed.Truncate(time.Second)) {
			t.Errorf("slot %s from before the resume ran", r.run.Slot)
		}
	}
	if st := reps[0].sched.Stats().Task(task.Name); st.Paused.Load() || st.Missed.Load() != 0 {
		t.Errorf("after the resume: paused %v, missed %d (skipped slots are not missed)", st.Paused.Load(), st.Missed.Load())
	}
}

// paused = true in the config starts the task paused, on the embedded
// store too; an operator's resume starts it.
func TestConfigPausedStartsPaused(t *testing.T) {
	testlane.Parallel(t, lightLane)
	store := memlock.New(nil)
	l := newLedger()
	task := testTask(t, "tick", "@every 1s", l.job(ok), func(t *scheduler.Task) { t.Paused = true })
	r := startReplica(t, "r1", store, time.Second, []scheduler.Task{task}, scheduler.WithClockCheck(200*time.Millisecond))
	await(t, "two skipped slots", 10*time.Second, func() bool { return skipped(r, task.Name) >= 2 })
	if rs := l.snapshot(); len(rs) != 0 {
		t.Fatalf("a paused task ran:\n%s", dump(rs))
	}
	if _, err := store.SetPaused(context.Background(), task.Name, lock.Resume); err != nil {
		t.Fatal(err)
	}
	l.await(t, "a run after the resume", 10*time.Second, func(rs []record) bool { return len(rs) > 0 })
}

// forbid: while one slot runs, the next ones are won, skipped and
// recorded (done, skipped_forbid), once each; after it ends, slots run.
func TestForbidSkipsWhileRunning(t *testing.T) {
	testlane.Parallel(t, lightLane)
	stores := redisStores(t, 2)
	l := newLedger()
	hist := history.NewMemory(0)
	release := make(chan struct{})
	var once sync.Once
	job := l.job(func(ctx context.Context, _ tasks.Run) error {
		block := false
		once.Do(func() { block = true })
		if block {
			select {
			case <-release:
			case <-ctx.Done(): // a failed test stops the replicas: no hang
			}
		}
		return nil
	})
	task := testTask(t, "tick", "@every 1s", job, func(t *scheduler.Task) { t.Concurrency = scheduler.ConcurrencyForbid })
	var reps []*replica
	for i, s := range stores {
		reps = append(reps, startReplica(t, fmt.Sprintf("r%d", i), s, time.Second, []scheduler.Task{task}, scheduler.WithHistory(hist)))
	}
	unblock := sync.OnceFunc(func() { close(release) })
	t.Cleanup(unblock) // before the replicas stop (cleanups run last first)
	l.await(t, "the long run", 10*time.Second, func(rs []record) bool { return len(rs) == 1 })
	es := awaitHistory(t, hist, task.Name, "two skipped slots", func(es []scheduler.HistoryEntry) bool {
		n := 0
		for _, e := range es {
			if e.Outcome == stats.OutcomeSkippedForbid {
				n++
			}
		}
		return n >= 2
	})
	seen := map[string]bool{}
	for _, e := range es {
		if seen[e.Slot] {
			t.Errorf("slot %s recorded twice: %+v", e.Slot, es)
		}
		seen[e.Slot] = true
		st, err := lock.ReadState(context.Background(), stores[0], lock.Slot{Task: task.Name, ID: e.Slot})
		if err != nil || st.Status != "done" {
			t.Errorf("skipped slot %s: state %+v, %v; want done", e.Slot, st, err)
		}
	}
	var n uint64
	for _, r := range reps {
		n += r.sched.Stats().Task(task.Name).Skipped[1].Load()
	}
	if n < 2 {
		t.Errorf("slotd_slots_skipped_total{reason=forbid} = %d, want >= 2", n)
	}
	if rs := l.snapshot(); len(rs) != 1 {
		t.Fatalf("a slot ran beside the running one:\n%s", dump(rs))
	}
	unblock()
	l.await(t, "runs again after the long one", 10*time.Second, func(rs []record) bool { return len(rs) >= 3 })
}

// forbid, with the running slot's holder crashed: its record ends with
// its lease, then slots run again.
func TestForbidAfterHolderCrash(t *testing.T) {
	testlane.Parallel(t, lightLane)
	stores := redisStores(t, 1)
	l := newLedger()
	task := testTask(t, "tick", "@every 1s", l.job(ok), func(t *scheduler.Task) { t.Concurrency = scheduler.ConcurrencyForbid })
	// A holder that crashed while running slot "19990101000000": its record
	// has 2s of lease left, which nobody renews.
	crashed := lock.Slot{Task: task.Name, ID: "19990101000000"}
	ctx := context.Background()
	planted := time.Now() // before the record's TTL starts
	if o, err := controls(t, stores[0]).Occupy(ctx, crashed, lock.Owner{ID: "dead#0", Attempt: 1}, 2*time.Second, false); err != nil || !o.Taken {
		t.Fatal(o, err)
	}
	r := startReplica(t, "r1", stores[0], time.Second, []scheduler.Task{task})
	rs := l.await(t, "a run once the crashed holder's lease ran out", 10*time.Second, func(rs []record) bool { return len(rs) > 0 })
	if took := rs[0].started.Sub(planted); took < 1900*time.Millisecond { // a little slack for Redis's clock
		t.Errorf("a slot ran %v after the crashed holder's record, inside its 2s lease", took)
	}
	if n := r.sched.Stats().Task(task.Name).Skipped[1].Load(); n == 0 {
		t.Error("no slot skipped while the crashed holder's record lived")
	}
}

// replace: a newer slot cancels the running attempt (cause
// ErrSuperseded), whose slot is marked done (superseded), and runs once
// it has stopped.
func TestReplaceCancelsRunning(t *testing.T) {
	testlane.Parallel(t, lightLane)
	stores := redisStores(t, 2)
	l := newLedger()
	hist := history.NewMemory(0)
	causes := make(chan error, 10)
	var once sync.Once
	var firstEnded, overlapped atomic.Bool
	job := l.job(func(ctx context.Context, _ tasks.Run) error {
		first := false
		once.Do(func() { first = true })
		if !first {
			overlapped.Store(overlapped.Load() || !firstEnded.Load())
			return nil
		}
		<-ctx.Done()
		causes <- context.Cause(ctx)
		firstEnded.Store(true)
		return ctx.Err()
	})
	task := testTask(t, "tick", "@every 2s", job, func(t *scheduler.Task) { t.Concurrency = scheduler.ConcurrencyReplace })
	for i, s := range stores {
		startReplica(t, fmt.Sprintf("r%d", i), s, time.Second, []scheduler.Task{task}, scheduler.WithHistory(hist))
	}
	rs := l.await(t, "the replacing run", 15*time.Second, func(rs []record) bool { return len(rs) >= 2 })
	select {
	case cause := <-causes:
		if !errors.Is(cause, scheduler.ErrSuperseded) {
			t.Errorf("the replaced task's cause = %v, want ErrSuperseded", cause)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the replaced task was not cancelled")
	}
	if overlapped.Load() {
		t.Fatalf("the replacing run started before the replaced one ended:\n%s", dump(rs))
	}
	es := awaitHistory(t, hist, task.Name, "the superseded attempt", func(es []scheduler.HistoryEntry) bool {
		for _, e := range es {
			if e.Outcome == stats.OutcomeSuperseded {
				return true
			}
		}
		return false
	})
	for _, e := range es {
		if e.Outcome == stats.OutcomeSuperseded {
			if e.Slot != rs[0].run.Slot {
				t.Errorf("superseded slot %s, want %s", e.Slot, rs[0].run.Slot)
			}
			st, err := lock.ReadState(context.Background(), stores[0], lock.Slot{Task: task.Name, ID: e.Slot})
			if err != nil || st.Status != "done" {
				t.Errorf("superseded slot: state %+v, %v; want done", st, err)
			}
		}
	}
}

// replace, with the running slot's holder crashed: the new slot takes the
// record over and starts once the crashed holder's lease has run out, not
// before (nobody is left to stop the old attempt).
func TestReplaceAfterHolderCrash(t *testing.T) {
	testlane.Parallel(t, lightLane)
	stores := redisStores(t, 1)
	l := newLedger()
	task := testTask(t, "tick", "@every 1s", l.job(ok), func(t *scheduler.Task) { t.Concurrency = scheduler.ConcurrencyReplace })
	ctx := context.Background()
	// A holder that crashed while running slot "19990101000000": its slot
	// lease and its record have 2s left, which nobody renews.
	crashed := lock.Slot{Task: task.Name, ID: "19990101000000", Time: time.Now().Add(-time.Minute), Deadline: time.Now().Add(time.Hour)}
	planted := time.Now() // before the lease's TTL starts
	c, err := stores[0].Claim(ctx, crashed, "dead#0", lock.Policy{Lease: 2 * time.Second, DoneTTL: time.Hour, MaxAttempts: 3})
	if err != nil || c.Result != lock.Won {
		t.Fatal(c, err)
	}
	if o, err := controls(t, stores[0]).Occupy(ctx, crashed, lock.Owner{ID: "dead#0", Attempt: c.Attempt}, 2*time.Second, false); err != nil || !o.Taken {
		t.Fatal(o, err)
	}
	startReplica(t, "r1", stores[0], time.Second, []scheduler.Task{task})
	rs := l.await(t, "a run once the crashed holder's lease ran out", 10*time.Second, func(rs []record) bool { return len(rs) > 0 })
	if took := rs[0].started.Sub(planted); took < 1900*time.Millisecond { // a little slack for Redis's clock
		t.Errorf("the replacing slot ran %v after the crashed holder's claim, inside its 2s lease", took)
	}
	if st, err := lock.ReadState(ctx, stores[0], crashed); err != nil || st.Status != "free" {
		t.Errorf("the crashed holder's slot: %+v, %v; want free (its lease ran out)", st, err)
	}
}

// forbid, with a run three times as long as its lease: the task's running
// record is renewed with the lease, by the lease's watchdog, so it never
// runs out while the task runs, and every slot fired meanwhile is skipped.
func TestForbidRecordLivesAsLongAsTheLease(t *testing.T) {
	stores := redisStores(t, 2)
	l := newLedger()
	hist := history.NewMemory(0)
	release := make(chan struct{})
	var once sync.Once
	job := l.job(func(ctx context.Context, _ tasks.Run) error {
		block := false
		once.Do(func() { block = true })
		if block {
			select {
			case <-release:
			case <-ctx.Done(): // a failed test stops the replicas: no hang
			}
		}
		return nil
	})
	const lease = time.Second
	task := testTask(t, "tick", "@every 1s", job, func(t *scheduler.Task) {
		t.Concurrency = scheduler.ConcurrencyForbid
		t.Lease = lease
	})
	for i, s := range stores {
		startReplica(t, fmt.Sprintf("r%d", i), s, time.Second, []scheduler.Task{task}, scheduler.WithHistory(hist))
	}
	unblock := sync.OnceFunc(func() { close(release) })
	t.Cleanup(unblock) // before the replicas stop (cleanups run last first)
	rs := l.await(t, "the long run", 10*time.Second, func(rs []record) bool { return len(rs) == 1 })
	awaitHistory(t, hist, task.Name, "three skipped slots", func(es []scheduler.HistoryEntry) bool {
		n := 0
		for _, e := range es {
			if e.Outcome == stats.OutcomeSkippedForbid {
				n++
			}
		}
		return n >= 3
	})
	// The third slot after the long run's fires three leases after its
	// slot time: timed from the slot, not from the run's start (which a
	// loaded machine delays), the skips span three leases.
	if took := time.Since(rs[0].run.SlotTime); took < 3*lease {
		t.Fatalf("three slots skipped %v after the long run's slot time, under three leases: the test shows nothing", took)
	}
	if rs := l.snapshot(); len(rs) != 1 {
		t.Fatalf("a slot ran beside the running one, whose record ran out:\n%s", dump(rs))
	}
	unblock()
	l.await(t, "runs again after the long one", 10*time.Second, func(rs []record) bool { return len(rs) >= 2 })
}

// replace, with a long lease (renewals 10s apart): the task's notice, sent
// by the replacing slot, makes the replaced holder's watchdog renew at
// once, and so find its record replaced and cancel its task, without
// waiting for its next turn.
func TestReplaceNoticeCancelsAtOnce(t *testing.T) {
	testlane.Parallel(t, lightLane)
	stores := redisStores(t, 2)
	l := newLedger()
	cancelled := make(chan time.Time, 1)
	var once sync.Once
	job := l.job(func(ctx context.Context, _ tasks.Run) error {
		first := false
		once.Do(func() { first = true })
		if !first {
			return nil
		}
		<-ctx.Done()
		cancelled <- time.Now()
		return ctx.Err()
	})
	const lease = 30 * time.Second
	task := testTask(t, "tick", "@every 2s", job, func(t *scheduler.Task) {
		t.Concurrency = scheduler.ConcurrencyReplace
		t.Lease = lease
	})
	for i, s := range stores {
		startReplica(t, fmt.Sprintf("r%d", i), s, time.Second, []scheduler.Task{task}, scheduler.WithHistory(history.NewMemory(0)))
	}
	rs := l.await(t, "the first run", 10*time.Second, func(rs []record) bool { return len(rs) >= 1 })
	next := rs[0].run.SlotTime.Add(2 * time.Second)
	var at time.Time
	select {
	case at = <-cancelled:
	case <-time.After(lease / 3):
		t.Fatalf("the replaced task was not cancelled within %v (a renewal's turn)", lease/3)
	}
	t.Logf("replaced task cancelled %v after the replacing slot's time (renewals every %v)", at.Sub(next), lease/3)
	if d := at.Sub(next); d > 3*time.Second {
		t.Errorf("replaced task cancelled %v after the replacing slot's time, want at once (not at the next renewal, %v apart)", d, lease/3)
	}
}

// A key of the wrong type at one task's pause and trigger keys costs that
// task's controls alone: the other task's trigger runs and its pause
// takes hold on the replica.
func TestBadControlKeyCostsItsTaskAlone(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	ctx := context.Background()
	store := redislock.New(rdb, "slotd")
	if err := store.Subscribe(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	triggers, paused, _, _ := redislock.ControlKeys("slotd", "bad")
	for _, key := range []string{triggers, paused} {
		if err := rdb.SAdd(ctx, key, "planted").Err(); err != nil {
			t.Fatal(err)
		}
	}
	l := newLedger()
	// Yearly tasks with a short window: no scheduled slot fires meanwhile.
	yearly := func(t *scheduler.Task) { t.Deadline = 10 * time.Minute }
	bad, good := testTask(t, "bad", "0 0 1 1 *", l.job(ok), yearly), testTask(t, "good", "0 0 1 1 *", l.job(ok), yearly)
	r := startReplica(t, "r1", store, time.Second, []scheduler.Task{bad, good}, scheduler.WithClockCheck(200*time.Millisecond))
	if tr, err := store.Trigger(ctx, "good", "k1", good.Window()); err != nil || tr.Result != lock.Started {
		t.Fatalf("trigger good = %+v, %v", tr, err)
	}
	l.await(t, "good's triggered run", 10*time.Second, func(rs []record) bool { return len(rs) == 1 && rs[0].done })
	if p, err := store.SetPaused(ctx, "good", lock.Pause); err != nil || !p {
		t.Fatalf("pause good = %v, %v", p, err)
	}
	await(t, "good paused on the replica", 10*time.Second, func() bool { return r.sched.Stats().Task("good").Paused.Load() })
}
