package observe_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/observe"
	"github.com/slotd/slotd/lock/memlock"
	"github.com/slotd/slotd/scheduler"
)

// Issue 28: a fresh embedded daemon's first screen said "1 failing" and
// showed the slots from before it existed as missed, because the embedded
// store recorded no first start. Its scheduler now records one, and those
// slots are unscheduled.
func TestEmbeddedDaemonsEarlierSlotsUnscheduled(t *testing.T) {
	store := memlock.New(nil)
	hourly := statusTask(t, "hourly", "0 * * * *", 3, 48*time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- scheduler.New([]scheduler.Task{hourly}, store, scheduler.WithReplica("solo")).Run(ctx) }()
	defer func() { cancel(); <-done }()

	var first time.Time
	for deadline := time.Now().Add(10 * time.Second); first.IsZero(); {
		var err error
		if first, err = store.FirstStart(ctx); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("the scheduler recorded no first start in the embedded store")
		}
		time.Sleep(10 * time.Millisecond)
	}
	ts, err := observe.Status(ctx, []scheduler.Task{hourly}, store, nil, first.Add(time.Minute), 3)
	if err != nil {
		t.Fatal(err)
	}
	earlier := 0
	for _, s := range ts[0].Slots {
		if s.Time.Before(first.Truncate(time.Hour)) {
			earlier++
			if s.Phase != observe.PhaseUnscheduled {
				t.Errorf("slot %s from before the first start %v: phase %s, want %s", s.ID, first, s.Phase, observe.PhaseUnscheduled)
			}
		}
	}
	if earlier == 0 {
		t.Fatalf("no slot from before the first start listed: %+v", ts[0].Slots)
	}
	var page bytes.Buffer
	if err := observe.WritePage(&page, observe.Page{Overview: observe.NewOverview(first.Add(time.Minute), ts, observe.Filter{})}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(page.String(), "failing)") {
		t.Error("a fresh embedded daemon's page says failing")
	}
}
