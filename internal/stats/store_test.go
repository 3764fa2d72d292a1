package stats

import (
	"errors"
	"testing"
	"time"

	"github.com/slotd/slotd/lock"
)

// Wrote counts errors by kind, reports a change of kind only, ignores the
// protocol's answers, and a success after a success changes nothing.
func TestStoreWrote(t *testing.T) {
	var s Store
	at := time.Unix(100, 0)
	oom := errors.New("OOM command not allowed when used memory > 'maxmemory'.")
	steps := []struct {
		err     error
		changed bool
		kind    lock.ErrorKind
	}{
		{nil, false, lock.KindNone},            // the first result: no change of kind
		{nil, false, lock.KindNone},            // success after success
		{oom, true, lock.KindOOM},              // refusal starts
		{oom, false, lock.KindOOM},             // still refused: counted, not a change
		{lock.ErrNotHeld, false, lock.KindOOM}, // an answer, not a store error
		{nil, true, lock.KindNone},             // taken again
	}
	for i, st := range steps {
		_, changed := s.Wrote("claim", st.err, at)
		if changed != st.changed || s.LastWrite().Kind != st.kind {
			t.Errorf("step %d (%v): changed %v kind %q, want %v %q", i, st.err, changed, s.LastWrite().Kind, st.changed, st.kind)
		}
	}
	if n := s.Errors[lock.KindOOM].Load(); n != 2 {
		t.Errorf("oom errors %d, want 2", n)
	}
	if p := s.LastProbe(); p.Op != "" {
		t.Errorf("probe recorded without a probe: %+v", p)
	}
}
