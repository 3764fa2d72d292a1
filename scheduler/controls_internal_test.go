package scheduler

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/slotd/slotd/lock/memlock"
)

// The controller's read indexes the tasks once per task list: after a
// reload it finds the added task, and passes the reloaded definition to
// the loop.
func TestControllerReadFollowsReload(t *testing.T) {
	store := memlock.New(time.Now)
	l := testLoop(t, store)
	c := newController(l.s, &l.inbox)
	ctx := context.Background()
	c.read(ctx, []string{"report"})
	if c.tasks()["other"] != nil {
		t.Fatal("a task not configured is indexed")
	}
	other := l.s.Tasks()[0]
	other.Name = "other"
	l.s.setTasks([]Task{l.s.Tasks()[0], other})
	if _, err := store.Trigger(ctx, "other", "", time.Minute); err != nil {
		t.Fatal(err)
	}
	c.read(ctx, []string{"other"})
	events := l.inbox.take(nil)
	if len(events) != 1 || events[0].kind != triggered || events[0].task != &l.s.Tasks()[1] {
		t.Fatalf("after the reload, the added task's trigger: %d events %+v; want one, triggered, of the reloaded task", len(events), events)
	}
}

// The triggered slots the controller remembers are swept once they have
// doubled since the last sweep: those past their deadline go, the others
// stay, and a read between sweeps walks none of them.
func TestTriggeredSlotsSweptAsTheyDouble(t *testing.T) {
	l := testLoop(t, memlock.New(time.Now))
	c := newController(l.s, &l.inbox)
	ctx := context.Background()
	past, later := time.Now().Add(-time.Minute), time.Now().Add(time.Hour)
	for i := range 100 {
		c.seen[fmt.Sprint("live-", i)] = later
	}
	c.read(ctx, []string{"report"}) // 100 < 2×64: not swept
	if len(c.seen) != 100 || c.swept != 0 {
		t.Fatalf("%d remembered, swept at %d; want 100, none", len(c.seen), c.swept)
	}
	for i := range 100 {
		c.seen[fmt.Sprint("gone-", i)] = past
	}
	c.read(ctx, []string{"report"}) // 200 ≥ 128: swept
	if len(c.seen) != 100 || c.swept != 100 {
		t.Fatalf("%d remembered, %d after the sweep; want the 100 live", len(c.seen), c.swept)
	}
	for i := range 99 {
		c.seen[fmt.Sprint("gone-", i)] = past
	}
	c.read(ctx, []string{"report"}) // 199 < 2×100: not swept
	if len(c.seen) != 199 {
		t.Fatalf("%d remembered, want 199 (no sweep before 200)", len(c.seen))
	}
	c.seen["gone-99"] = past
	c.read(ctx, []string{"report"})
	if len(c.seen) != 100 {
		t.Fatalf("%d remembered after the second sweep, want the 100 live", len(c.seen))
	}
}
