package scheduler

import (
	"container/heap"
	"testing"
	"time"

	"github.com/slotd/slotd/lock/memlock"
)

// Under sustained load this replica's claims may be pending at every
// turn, so releaseChecks never empties the held-back deferrals: the list
// drops those read meanwhile as it grows, rather than holding every
// deferral since claims were last all answered.
func TestHeldChecksDoNotPileUp(t *testing.T) {
	l := testLoop(t, memlock.New(time.Now))
	l.pending = 1
	for range 10000 {
		now := time.Now()
		d := &deferral{index: -1, start: now, checkAt: now, until: now.Add(time.Hour)}
		heap.Push(&l.checks, d)
		l.checkDue()
		if d.index < 0 || l.heldChecks[len(l.heldChecks)-1] != d {
			t.Fatal("a deferral due while claims are pending was not held back")
		}
		heap.Remove(&l.checks, d.index) // read at its limit
		l.releaseChecks()
	}
	if n := len(l.heldChecks); n > 2 {
		t.Errorf("%d deferrals held back after 10,000 read at their limit, want at most 2 (the last)", n)
	}
}
