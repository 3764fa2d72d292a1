package observe_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/observe"
	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/lock/redislock"
	"github.com/slotd/slotd/scheduler"
)

// Issue 16 item 8: a fresh fleet's status called the slots from before any
// replica existed "missed" and the page "failing". They are "unscheduled";
// a slot that fired after the fleet's first start and was never claimed is
// still missed.
func TestStatusSlotsBeforeFirstStartUnscheduled(t *testing.T) {
	srv := redistest.Start(t)
	store := redislock.New(srv.Client(), "slotd")
	defer store.Close()
	ctx := context.Background()
	first := time.Date(2026, 3, 2, 10, 20, 0, 0, time.UTC)
	if _, err := store.Started(ctx, first); err != nil {
		t.Fatal(err)
	}
	hourly := statusTask(t, "hourly", "0 * * * *", 3, 48*time.Hour)
	leap := statusTask(t, "leap", "0 0 29 2 *", 3, 5*366*24*time.Hour)
	leap.Catchup, leap.CatchupLimit = scheduler.CatchupLatest, 24*time.Hour

	for _, tc := range []struct {
		name string
		now  time.Time
		want map[string][]string // task: phases, newest first
	}{
		{"fresh", first.Add(5 * time.Minute), map[string][]string{
			// 10:00 was open at the first start, but catchup is none.
			"hourly": {observe.PhaseUnscheduled, observe.PhaseUnscheduled, observe.PhaseUnscheduled},
			"leap":   {observe.PhaseUnscheduled},
		}},
		{"later", first.Add(2 * time.Hour), map[string][]string{
			"hourly": {observe.PhasePending, observe.PhaseMissed, observe.PhaseUnscheduled},
			"leap":   {observe.PhaseUnscheduled},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts, err := observe.Status(ctx, []scheduler.Task{hourly, leap}, store, nil, tc.now, 3)
			if err != nil {
				t.Fatal(err)
			}
			for _, task := range ts {
				want := tc.want[task.Name]
				var got []string
				for _, s := range task.Slots[:min(len(want), len(task.Slots))] {
					got = append(got, s.Phase)
				}
				if strings.Join(got, ",") != strings.Join(want, ",") {
					t.Errorf("%s: phases %v, want %v (slots %+v)", task.Name, got, want, task.Slots)
				}
			}
			var page bytes.Buffer
			if err := observe.WritePage(&page, observe.Page{Overview: observe.NewOverview(tc.now, ts, observe.Filter{})}); err != nil {
				t.Fatal(err)
			}
			failing := strings.Contains(page.String(), "(1 failing)")
			if tc.name == "fresh" && strings.Contains(page.String(), "failing)") {
				t.Errorf("a fresh fleet's page says failing")
			}
			if tc.name == "later" && !failing {
				t.Errorf("the page does not count the missed slot as failing")
			}
		})
	}
}
