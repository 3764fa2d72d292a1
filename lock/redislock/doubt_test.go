package redislock

import (
	"fmt"
	"testing"
	"time"
)

// A sweep drops the records past their slot's deadline with no claim in
// flight, and keeps the others: an open window's, and a claim's whose
// answer has not come (its answer must still find the record).
func TestDoubtsSweepDropsOnlyClosedIdleRecords(t *testing.T) {
	var d doubts
	past, future := time.Now().Add(-time.Minute), time.Now().Add(time.Hour)
	d.send("in-flight", "r1", past) // sent, never answered
	for i := range maxDoubts - 2 {
		d.record(doubtKey{fmt.Sprintf("closed-%d", i), "r1"}, past)
	}
	d.record(doubtKey{"open", "r1"}, future)
	if len(d.m) != maxDoubts {
		t.Fatalf("before the sweep: %d records, want %d", len(d.m), maxDoubts)
	}
	d.record(doubtKey{"new", "r1"}, future) // the record that sweeps
	for _, k := range []string{"in-flight", "open", "new"} {
		if d.m[doubtKey{k, "r1"}] == nil {
			t.Errorf("record %q was swept; want it kept", k)
		}
	}
	if len(d.m) != 3 {
		t.Errorf("after the sweep: %d records, want 3 (the closed ones dropped)", len(d.m))
	}
}

// With more slots open than maxDoubts (10,000 slots a second hold about
// that many), the sweeps' cost stays a constant share per record: each
// sweep is paid for by the records added since the one before.
func TestDoubtsSweepCostIsSharedWhileWindowsAreOpen(t *testing.T) {
	var d doubts
	future := time.Now().Add(time.Hour)
	const n = 16 * maxDoubts
	for i := range n {
		d.send(fmt.Sprintf("open-%d", i), "r1", future)
	}
	if len(d.m) != n {
		t.Fatalf("%d records, want %d (every window open)", len(d.m), n)
	}
	if d.visited > 2*n {
		t.Errorf("the sweeps looked at %d records for %d added; want at most %d", d.visited, n, 2*n)
	}
}
