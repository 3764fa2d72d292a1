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
	oom := &lock.StoreError{Kind: lock.KindOOM, Store: "redis", Code: "OOM", Fix: "raise maxmemory",
		Err: errors.New("OOM command not allowed when used memory > 'maxmemory'.")}
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
	s.Wrote("claim", oom, at)
	if w := s.LastWrite(); w.Store != "redis" || w.Code != "OOM" || w.Fix != "raise maxmemory" {
		t.Errorf("a refusal recorded as %+v, want the StoreError's store, code and fix", w)
	}
	if n := s.Errors[lock.KindOOM].Load(); n != 3 {
		t.Errorf("oom errors %d, want 3", n)
	}
	if p := s.LastProbe(); p.Op != "" {
		t.Errorf("probe recorded without a probe: %+v", p)
	}
}
