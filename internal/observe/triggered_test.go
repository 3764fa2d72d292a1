package observe_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/observe"
	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/scheduler"
)

// Issue 26 item 8: a run-now of a yearly task that ends exhausted was
// missing from the status, the task API and the overview, which showed
// the task unscheduled and nothing failing. Its slot is listed among the
// task's latest, with its attempts counted from 1, and the task is failing.
func TestStatusShowsTriggeredSlots(t *testing.T) {
	srv := redistest.Start(t)
	store := lock.NewRedis(srv.Client(), "slotd")
	defer store.Close()
	ctx := context.Background()
	yearly := statusTask(t, "yearly", "0 0 1 1 *", 2, 48*time.Hour)
	tr, err := store.Trigger(ctx, yearly.Name, "", yearly.Window())
	if err != nil {
		t.Fatal(err)
	}
	slot := yearly.TriggerSlot(tr.Time)
	if err := store.ArmTrigger(ctx, slot, yearly.DoneTTL); err != nil {
		t.Fatal(err)
	}
	for range yearly.MaxAttempts {
		c, err := store.Claim(ctx, slot, "r1#x", yearly.Policy)
		if err != nil || c.Result != lock.Won {
			t.Fatalf("claim = %+v, %v", c, err)
		}
		if err := store.Release(ctx, slot, lock.Owner{Replica: "r1#x", Attempt: c.Attempt}); err != nil {
			t.Fatal(err)
		}
	}
	now, err := store.Time(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ts, err := observe.Status(ctx, []scheduler.Task{yearly}, store, nil, now, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 1 || len(ts[0].Slots) == 0 {
		t.Fatalf("status %+v", ts)
	}
	got := ts[0].Slots[0]
	if got.ID != slot.ID || got.Phase != observe.PhaseExhausted || got.Attempts != yearly.MaxAttempts {
		t.Fatalf("newest slot %+v; want the triggered %s, exhausted after %d attempts", got, slot.ID, yearly.MaxAttempts)
	}
	if len(ts[0].Slots) != 3 {
		t.Errorf("%d slots, want the trigger and the 2 latest scheduled", len(ts[0].Slots))
	}
	o := observe.NewOverview(now, ts, observe.Filter{})
	if o.Failing() != 1 || o.Tasks[0].State != observe.PhaseExhausted {
		t.Errorf("overview: %d failing, state %s; want the task exhausted", o.Failing(), o.Tasks[0].State)
	}
	var page bytes.Buffer
	if err := observe.WritePage(&page, observe.Page{Overview: o}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(page.String(), "(1 failing)") {
		t.Error("the page does not count the exhausted run-now as failing")
	}
}
