package stats

import (
	"fmt"
	"testing"
	"time"

	"github.com/slotd/slotd/lock"
)

// A value on a bucket's upper bound falls in that bucket (le is "less or
// equal"), as in client_golang's histograms.
func TestHistogramBounds(t *testing.T) {
	for _, tc := range []struct {
		v    float64
		want int // bucket index; Buckets is the +Inf bucket
	}{
		{0, 0}, {-1, 0}, {DurationBounds[0], 0}, {DurationBounds[0] * 1.0001, 1},
		{DurationBounds[Buckets-1], Buckets - 1}, {DurationBounds[Buckets-1] * 1.0001, Buckets},
	} {
		h := Histogram{upper: DurationBounds}
		h.Observe(tc.v)
		for i := range Buckets + 1 {
			if n := h.Bucket(i); i == tc.want && n != 1 || i != tc.want && n != 0 {
				t.Errorf("Observe(%v): bucket %d holds %d, want the value in bucket %d", tc.v, i, n, tc.want)
			}
		}
	}
}

// The bounds are the exponential series the metrics have always had.
func TestBounds(t *testing.T) {
	if DurationBounds[0] != 0.01 || DurationBounds[Buckets-1] != 2621.44 ||
		StartDelayBounds[0] != 0.001 || StartDelayBounds[Buckets-1] != 262.144 {
		t.Errorf("bounds %v, %v", DurationBounds, StartDelayBounds)
	}
}

// A task's counters start at zero with no last success; a name given twice
// is one task; results and outcomes outside the known sets count as errors
// and failures; the last success never moves back.
func TestTaskCounters(t *testing.T) {
	set := New([]TaskInfo{{Name: "a", Window: time.Minute}, {Name: "a"}, {Name: "b"}})
	if len(set.Tasks()) != 2 || set.Task("a").Window() != time.Minute || set.Task("c") != nil {
		t.Fatalf("tasks %d, a's window %v, c %v", len(set.Tasks()), set.Task("a").Window(), set.Task("c"))
	}
	a := set.Task("a")
	if _, ok := a.LastSuccess(); ok {
		t.Error("a last success before any")
	}
	a.Claimed(lock.Result(42))
	a.ClaimFailed()
	a.Ran("bogus")
	if a.Claims[0].Load() != 2 || a.Runs[1].Load() != 1 {
		t.Errorf("errors %d, failures %d; want 2, 1", a.Claims[0].Load(), a.Runs[1].Load())
	}
	newer := time.Date(2026, 11, 23, 3, 0, 0, 0, time.UTC)
	a.Succeeded(newer)
	a.Succeeded(newer.Add(-time.Hour))
	if at, ok := a.LastSuccess(); !ok || !at.Equal(newer) {
		t.Errorf("last success %v %v, want %v", at, ok, newer)
	}
}

// A reload's Update keeps a kept task's counters, lists only the new
// tasks, and still finds a dropped one, whose last attempts may be running.
func TestUpdateKeepsCounters(t *testing.T) {
	set := New([]TaskInfo{{Name: "kept", Window: time.Minute}, {Name: "dropped"}})
	kept, dropped := set.Task("kept"), set.Task("dropped")
	kept.Exhausted.Inc()
	set.Update([]TaskInfo{{Name: "added"}, {Name: "kept", Window: time.Hour}})
	var names []string
	for _, st := range set.Tasks() {
		names = append(names, st.Name)
	}
	if fmt.Sprint(names) != "[added kept]" {
		t.Errorf("tasks after update: %v, want [added kept]", names)
	}
	if set.Task("kept") != kept || kept.Exhausted.Load() != 1 || kept.Window() != time.Hour {
		t.Errorf("kept task: same %v, exhausted %d, window %v", set.Task("kept") == kept, kept.Exhausted.Load(), kept.Window())
	}
	if set.Task("dropped") != dropped {
		t.Error("a dropped task's counters are no longer found by name")
	}
	if set.Task("added") == nil || set.Task("never") != nil {
		t.Errorf("added %v, never %v", set.Task("added"), set.Task("never"))
	}
}
