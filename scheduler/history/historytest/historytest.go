// Package historytest holds what the tests of every store's history share:
// the check that an entry planted by someone else reads back within the
// bounds of an entry slotd writes, marked as cut.
package historytest

import (
	"strings"
	"testing"

	"github.com/slotd/slotd/scheduler/history"
)

// CheckBounded fails unless every entry of es is within the caps of an
// entry slotd writes, and the one planted (its slot "planted") says first
// in its Error that it was cut, naming key and, in want, what.
func CheckBounded(t testing.TB, es []history.Entry, key string, want ...string) {
	t.Helper()
	found := false
	for _, e := range es {
		if len(e.Output) > history.MaxOutput || len(e.Error) > history.MaxError || len(e.Slot) > history.MaxError {
			t.Errorf("entry %s read back with %d bytes of output, %d of error, %d of slot: over the caps", e.ID, len(e.Output), len(e.Error), len(e.Slot))
		}
		if !strings.HasPrefix(e.Slot, "planted") && !strings.HasPrefix(e.Error, "[history entry") {
			continue
		}
		found = true
		if !strings.HasPrefix(e.Error, "[history entry "+e.ID+" of "+key+" cut on read: ") {
			t.Errorf("the planted entry's error = %.200q, want it to start with the cut mark naming %s and entry %s", e.Error, key, e.ID)
		}
		for _, w := range want {
			if !strings.Contains(e.Error, w) {
				t.Errorf("the planted entry's error = %.300q, want it to say %q", e.Error, w)
			}
		}
	}
	if !found {
		t.Errorf("the planted entry was not read back: %d entries", len(es))
	}
}
