package lock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/slotd/slotd/lock"
)

// A backoff value reads back as itself, as State "backoff", and answers a
// claim early until its end, late if that is not before the deadline, and
// not at all (free) once it has passed.
func TestBackoffValue(t *testing.T) {
	nb := time.UnixMilli(1_700_000_000_123).UTC()
	v, err := lock.ParseValue("backoff:1700000000123")
	if err != nil || !v.NotBefore.Equal(nb) || v.String() != "backoff:1700000000123" {
		t.Fatalf("ParseValue = %+v, %v", v, err)
	}
	if st := v.State(); st.Status != "backoff" || !st.NotBefore.Equal(nb) || st.Value != v.String() {
		t.Fatalf("State = %+v", st)
	}
	for _, bad := range []string{"backoff:", "backoff:x", "backoff:-5", "backoff:0"} {
		if _, err := lock.ParseValue(bad); !errors.Is(err, lock.ErrForeign) {
			t.Errorf("ParseValue(%q) = %v, want ErrForeign", bad, err)
		}
	}
	slot := lock.Slot{Task: "t", ID: "1", Time: nb.Add(-time.Minute), Deadline: nb.Add(time.Minute)}
	c, waits := (lock.Claim{}).AfterBackoff(slot, v, nb.Add(-time.Second))
	if !waits || c.Result != lock.Early || !c.Backoff || c.Wait != time.Second {
		t.Errorf("during the backoff: %+v, %v; want early by 1s", c, waits)
	}
	if _, waits := (lock.Claim{}).AfterBackoff(slot, v, nb); waits {
		t.Error("at its end the backoff still holds the slot")
	}
	slot.Deadline = nb
	if c, waits := (lock.Claim{}).AfterBackoff(slot, v, nb.Add(-time.Hour)); !waits || c.Result != lock.Late || !c.Backoff {
		t.Errorf("a backoff ending at the deadline: %+v, %v; want late", c, waits)
	}
}
