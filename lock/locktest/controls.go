package locktest

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/slotd/slotd/lock"
)

// RunControls runs the operator controls' conformance tests (lock.Controls:
// triggers, pauses, a task's running record) against h, whose store must
// implement lock.Controls, each as a subtest.
func RunControls(t *testing.T, h Harness) {
	c, ok := h.Store.(lock.Controls)
	if !ok {
		t.Fatalf("%T does not implement lock.Controls", h.Store)
	}
	if h.Policy == (lock.Policy{}) {
		h.Policy = DefaultPolicy
	}
	for _, tc := range controls {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, h, c) })
	}
}

var controls = []struct {
	name string
	run  func(*testing.T, Harness, lock.Controls)
}{
	{"TriggerIsIdempotentByKey", testTriggerIdempotent},
	{"TriggerKeysCappedPerTask", testTriggerKeysCapped},
	{"TriggeredTokensExceedSameSecondSlot", testTriggerTokens},
	{"PauseSeedResume", testPause},
	{"ConfigureAppliesChangedValues", testConfigure},
	{"OccupyForbidReplaceExpire", testOccupy},
	{"ReplaceAnsweredAgainToItsSlot", testReplaceAnsweredAgain},
	{"ControlKeysHaveTTL", testControlTTLs},
}

func wantSignal(t *testing.T, w *lock.Watch, what string) {
	t.Helper()
	select {
	case <-w.C():
	case <-time.After(5 * time.Second):
		t.Fatalf("no notice of %s", what)
	}
}

func testTriggerIdempotent(t *testing.T, h Harness, c lock.Controls) {
	ctx := context.Background()
	task := UniqueSlot(t, h).Task
	w := c.WatchTask(task)
	defer w.Stop()
	first, err := c.Trigger(ctx, task, "k1", time.Hour)
	if err != nil || first.Result != lock.Started {
		t.Fatalf("first trigger = %+v, %v; want started", first, err)
	}
	wantSignal(t, w, "a trigger")
	again, err := c.Trigger(ctx, task, "k1", time.Hour)
	if err != nil || again.Result != lock.Repeated || !again.Time.Equal(first.Time) {
		t.Fatalf("repeated key = %+v, %v; want repeated at %v", again, err, first.Time)
	}
	other, err := c.Trigger(ctx, task, "k2", time.Hour)
	if err != nil || (other.Result != lock.Started && other.Result != lock.Coalesced) {
		t.Fatalf("new key = %+v, %v", other, err)
	}
	want := 1
	if other.Result == lock.Started {
		want = 2 // the store's clock passed a second
	}
	all, err := c.Triggers(ctx, []string{"never-" + task, task})
	if err != nil || len(all) != 2 || len(all[0]) != 0 {
		t.Fatalf("Triggers = %v, %v", all, err)
	}
	if got := all[1]; len(got) != want || !got[0].Equal(first.Time) {
		t.Fatalf("Triggers = %v; want %d starting at %v", got, want, first.Time)
	}
}

// testTriggerKeysCapped: a task keeps its lock.MaxTriggerKeys latest
// idempotency keys; a client sending a new key with every request cannot
// grow the store without bound. All but the last key of the cap are
// planted where the harness can (Harness.PlantTriggerKeys); the key that
// fills the cap and the one past it are triggers, as are the checks.
func testTriggerKeysCapped(t *testing.T, h Harness, c lock.Controls) {
	ctx := context.Background()
	task := UniqueSlot(t, h).Task
	key := func(i int) string { return "k" + strconv.Itoa(i) }
	trigger := func(i int) {
		t.Helper()
		if tr, err := c.Trigger(ctx, task, key(i), time.Hour); err != nil || tr.Result == lock.Repeated {
			t.Fatalf("trigger with new key %s = %+v, %v", key(i), tr, err)
		}
	}
	last := lock.MaxTriggerKeys - 1 // the key that fills the cap
	if h.PlantTriggerKeys != nil {
		keys := make([]string, last)
		for i := range keys {
			keys[i] = key(i)
		}
		h.PlantTriggerKeys(task, keys)
	} else {
		for i := range last {
			trigger(i)
		}
	}
	trigger(last)
	if tr, err := c.Trigger(ctx, task, key(0), time.Hour); err != nil || tr.Result != lock.Repeated {
		t.Fatalf("key %s, the oldest of %d: %+v, %v; want repeated", key(0), lock.MaxTriggerKeys, tr, err)
	}
	trigger(last + 1)
	if tr, err := c.Trigger(ctx, task, key(1), time.Hour); err != nil || tr.Result != lock.Repeated {
		t.Fatalf("key %s, among the latest %d: %+v, %v; want repeated", key(1), lock.MaxTriggerKeys, tr, err)
	}
	if tr, err := c.Trigger(ctx, task, key(0), time.Hour); err != nil || tr.Result == lock.Repeated {
		t.Fatalf("key %s, the oldest of %d: %+v, %v; want it dropped", key(0), lock.MaxTriggerKeys+1, tr, err)
	}
}

func testTriggerTokens(t *testing.T, h Harness, c lock.Controls) {
	ctx := context.Background()
	sched := UniqueSlot(t, h)
	sched.Time = sched.Time.Truncate(time.Second)
	trig := lock.TriggerSlot(sched.Task, sched.Time.Add(300*time.Millisecond), time.Hour)
	if trig.ID == sched.ID || !trig.Time.Equal(sched.Time) || !trig.Triggered() || sched.Triggered() {
		t.Fatalf("trigger slot %+v beside scheduled %+v", trig, sched)
	}
	if err := c.ArmTrigger(ctx, trig, time.Hour); err != nil {
		t.Fatal(err)
	}
	tc := mustClaim(t, h, trig, "a", lock.Won)
	sc := mustClaim(t, h, sched, "b", lock.Won)
	if tc.Attempt != lock.TriggerBase+1 || tc.Base != lock.TriggerBase {
		t.Fatalf("triggered claim = attempt %d base %d; want %d, %d", tc.Attempt, tc.Base, lock.TriggerBase+1, lock.TriggerBase)
	}
	if lock.Token(trig.Time, tc.Attempt) <= lock.Token(sched.Time, sc.Attempt+h.Policy.MaxAttempts) {
		t.Fatalf("trigger's token %d not above the same second's scheduled tokens", lock.Token(trig.Time, tc.Attempt))
	}
	// Arming again after the claim changes nothing.
	if err := c.ArmTrigger(ctx, trig, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := h.Store.Release(ctx, trig, lock.Owner{ID: "a", Attempt: tc.Attempt}); err != nil {
		t.Fatal(err)
	}
	if again := mustClaim(t, h, trig, "a", lock.Won); again.Attempt != lock.TriggerBase+2 {
		t.Fatalf("second attempt = %d, want %d", again.Attempt, lock.TriggerBase+2)
	}
}

func testPause(t *testing.T, h Harness, c lock.Controls) {
	ctx := context.Background()
	task := UniqueSlot(t, h).Task
	w := c.WatchTask(task)
	defer w.Stop()
	check := func(want bool) {
		t.Helper()
		got, err := c.Paused(ctx, []string{"never-" + task, task}, true)
		if err != nil || len(got) != 2 || got[0] || got[1] != want {
			t.Fatalf("Paused = %v, %v; want [false %v]", got, err, want)
		}
	}
	check(false)
	epoch := func() int64 {
		t.Helper()
		n, err := c.Epoch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, step := range []struct {
		op     lock.PauseOp
		want   bool
		notice bool
	}{
		{lock.Seed, true, true},    // config paused = true, nothing recorded
		{lock.Resume, false, true}, // an operator resumes
		{lock.Seed, false, false},  // a restart does not pause it again
		{lock.Pause, true, true},   // an operator pauses
		{lock.Pause, true, false},  // twice
		{lock.Resume, false, true}, // and resumes
	} {
		before := epoch()
		got, err := c.SetPaused(ctx, task, step.op)
		if err != nil || got != step.want {
			t.Fatalf("SetPaused(%v) = %v, %v; want %v", step.op, got, err, step.want)
		}
		if step.notice {
			wantSignal(t, w, "a pause change")
		}
		if changed := epoch() != before; changed != step.notice {
			t.Fatalf("SetPaused(%v): epoch changed = %v, want %v", step.op, changed, step.notice)
		}
		check(step.want)
	}
}

// testConfigure: the config's paused value acts when it changes, as an
// operator's pause or resume, and an unchanged value leaves an operator's
// later pause or resume standing.
func testConfigure(t *testing.T, h Harness, c lock.Controls) {
	ctx := context.Background()
	task := UniqueSlot(t, h).Task
	fresh := "fresh-" + task
	w := c.WatchTask(task)
	defer w.Stop()
	epoch := func() int64 {
		t.Helper()
		n, err := c.Epoch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	// A first start: paused = true pauses a task without a state; false
	// records its value and nothing else.
	got, err := c.Configure(ctx, []string{task, fresh}, []bool{false, true})
	if err != nil || len(got) != 2 || got[0] || !got[1] {
		t.Fatalf("first Configure = %v, %v; want [false true]", got, err)
	}
	for i, step := range []struct {
		op     lock.PauseOp // 0: Configure with config
		config bool
		want   bool
		notice bool
	}{
		{0, true, true, true},             // the file says paused = true now
		{0, true, true, false},            // a reload or restart with it unchanged
		{lock.Resume, false, false, true}, // an operator resumes
		{0, true, false, false},           // the unchanged value does not pause it again
		{0, false, false, false},          // the file says false: already resumed
		{lock.Pause, false, true, true},   // an operator pauses
		{0, false, true, false},           // the unchanged false does not resume it
		{0, true, true, false},            // true: already paused
		{0, false, false, true},           // false again: resumed
		{lock.Seed, false, false, false},  // a write-back finds the resumed state
		{lock.Pause, false, true, true},   // paused by an operator
		{lock.Resume, false, false, true}, // and resumed
		{0, false, false, false},          // false, unchanged
	} {
		before := epoch()
		var p bool
		if step.op == 0 {
			var ps []bool
			ps, err = c.Configure(ctx, []string{task}, []bool{step.config})
			if len(ps) == 1 {
				p = ps[0]
			}
		} else {
			p, err = c.SetPaused(ctx, task, step.op)
		}
		if err != nil || p != step.want {
			t.Fatalf("step %d (op %v, config %v) = %v, %v; want %v", i, step.op, step.config, p, err, step.want)
		}
		if step.notice {
			wantSignal(t, w, "a pause change")
		}
		if changed := epoch() != before; changed != step.notice {
			t.Fatalf("step %d: epoch changed = %v, want %v", i, changed, step.notice)
		}
		if now, err := c.Paused(ctx, []string{task}, true); err != nil || now[0] != step.want {
			t.Fatalf("step %d: Paused = %v, %v; want %v", i, now, err, step.want)
		}
	}
	if _, err := c.Configure(ctx, []string{task}, nil); err == nil {
		t.Fatal("Configure with a value missing: no error")
	}
}

func testOccupy(t *testing.T, h Harness, c lock.Controls) {
	ctx := context.Background()
	a := UniqueSlot(t, h)
	b := a
	b.ID += "9"
	oa, ob := lock.Owner{ID: "r1#x", Attempt: 1}, lock.Owner{ID: "r2#y", Attempt: 1}
	w := c.WatchTask(a.Task)
	defer w.Stop()
	if o, err := c.Occupy(ctx, a, oa, 10*time.Second, false); err != nil || !o.Taken {
		t.Fatalf("first occupy = %+v, %v", o, err)
	}
	if o, err := c.Occupy(ctx, a, oa, 10*time.Second, false); err != nil || !o.Taken {
		t.Fatalf("occupy again by its holder = %+v, %v", o, err)
	}
	o, err := c.Occupy(ctx, b, ob, 10*time.Second, false)
	if err != nil || o.Taken || o.Other != a.ID || o.TTL <= 0 {
		t.Fatalf("forbid while %s runs = %+v, %v; want busy naming it", a.ID, o, err)
	}
	if err := c.RenewOccupancy(ctx, a, oa, 10*time.Second); err != nil {
		t.Fatalf("holder's renewal: %v", err)
	}
	if o, err = c.Occupy(ctx, b, ob, 10*time.Second, true); err != nil || !o.Taken || o.Other != a.ID {
		t.Fatalf("replace = %+v, %v; want taken from %s", o, err, a.ID)
	}
	wantSignal(t, w, "a replace")
	if err := c.RenewOccupancy(ctx, a, oa, 10*time.Second); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("replaced holder's renewal = %v, want ErrNotHeld", err)
	}
	if err := c.Vacate(ctx, a, oa); err != nil {
		t.Fatalf("replaced holder's vacate: %v", err)
	}
	if o, err = c.Occupy(ctx, a, oa, 10*time.Second, false); err != nil || o.Taken {
		t.Fatalf("forbid after the replace = %+v, %v; want busy", o, err)
	}
	if err := c.Vacate(ctx, b, ob); err != nil {
		t.Fatal(err)
	}
	if o, err = c.Occupy(ctx, a, oa, time.Second, false); err != nil || !o.Taken {
		t.Fatalf("occupy after vacate = %+v, %v", o, err)
	}
	// A crashed holder's record ends with its lease.
	h.Expire(2 * time.Second)
	if o, err = c.Occupy(ctx, b, ob, time.Second, false); err != nil || !o.Taken {
		t.Fatalf("occupy after the holder's lease ran out = %+v, %v", o, err)
	}
}

// A replace whose reply was lost (the record written, the replaced
// attempt told to stop): the same call sent again, and the slot's next
// attempt, are answered the replaced slot too, for a lease, so that they
// await its stop (model/controls.pml, R2); under forbid, and after the
// lease, nothing.
func testReplaceAnsweredAgain(t *testing.T, h Harness, c lock.Controls) {
	ctx := context.Background()
	const lease = 2 * time.Second // etcd's unit is a whole second
	a := UniqueSlot(t, h)
	b := a
	b.ID += "9"
	oa, ob, ob2 := lock.Owner{ID: "r1#x", Attempt: 1}, lock.Owner{ID: "r2#y", Attempt: 1}, lock.Owner{ID: "r1#x", Attempt: 2}
	if o, err := c.Occupy(ctx, a, oa, 10*lease, false); err != nil || !o.Taken {
		t.Fatalf("first occupy = %+v, %v", o, err)
	}
	if o, err := c.Occupy(ctx, b, ob, lease, true); err != nil || !o.Taken || o.Other != a.ID {
		t.Fatalf("replace = %+v, %v; want taken from %s", o, err, a.ID)
	}
	if o, err := c.Occupy(ctx, b, ob, lease, true); err != nil || !o.Taken || o.Other != a.ID {
		t.Fatalf("the replace sent again = %+v, %v; want taken, naming %s", o, err, a.ID)
	}
	if o, err := c.Occupy(ctx, b, ob2, lease, true); err != nil || !o.Taken || o.Other != a.ID {
		t.Fatalf("the replacing slot's next attempt = %+v, %v; want taken, naming %s", o, err, a.ID)
	}
	if o, err := c.Occupy(ctx, b, ob2, lease, false); err != nil || !o.Taken || o.Other != "" {
		t.Fatalf("forbid by the holder = %+v, %v; want taken, naming none", o, err)
	}
	h.Expire(lease + time.Second)
	if o, err := c.Occupy(ctx, b, ob, lease, true); err != nil || !o.Taken || o.Other != "" {
		t.Fatalf("a replace a lease after the last = %+v, %v; want taken, naming none", o, err)
	}
}

func testControlTTLs(t *testing.T, h Harness, c lock.Controls) {
	ctx := context.Background()
	slot := UniqueSlot(t, h)
	if _, err := c.Trigger(ctx, slot.Task, "k", time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetPaused(ctx, slot.Task, lock.Pause); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Configure(ctx, []string{slot.Task, "other-" + slot.Task}, []bool{true, false}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Occupy(ctx, slot, lock.Owner{ID: "r", Attempt: 1}, time.Minute, false); err != nil {
		t.Fatal(err)
	}
	if err := c.ArmTrigger(ctx, lock.TriggerSlot(slot.Task, slot.Time, time.Hour), time.Hour); err != nil {
		t.Fatal(err)
	}
	for k, ttl := range h.TTLs() {
		if ttl <= 0 {
			t.Errorf("key %s has no TTL (%v)", k, ttl)
		}
	}
}
