package etcdlock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/etcdtest"
	"github.com/slotd/slotd/lock"
)

// A Peek of more slots than one transaction may read (etcd's 128 ops)
// answers each slot in its place: a done one and a running one read as
// such from the second and third transactions, the rest free.
func TestPeekAcrossTransactions(t *testing.T) {
	s := newStore(t, etcdtest.Start(t, 3).Endpoints())
	ctx := context.Background()
	slots := make([]lock.Slot, 300)
	for i := range slots {
		slots[i] = openSlot(fmt.Sprintf("%s-%03d", t.Name(), i))
	}
	const done, running = 200, 290
	c, err := s.Claim(ctx, slots[done], "a", policy)
	if err != nil || c.Result != lock.Won {
		t.Fatalf("claim: %+v, %v", c, err)
	}
	if err := s.Complete(ctx, slots[done], lock.Owner{ID: "a", Attempt: c.Attempt}, time.Hour); err != nil {
		t.Fatal(err)
	}
	if c, err := s.Claim(ctx, slots[running], "a", policy); err != nil || c.Result != lock.Won {
		t.Fatalf("claim: %+v, %v", c, err)
	}
	sts, err := s.Peek(ctx, slots, nil)
	if err != nil || len(sts) != len(slots) {
		t.Fatalf("peek at %d slots: %d answers, %v", len(slots), len(sts), err)
	}
	for i, st := range sts {
		want := "free"
		switch i {
		case done:
			want = "done"
		case running:
			want = "running"
			if st.TTL <= 0 || st.TTL > policy.Lease {
				t.Errorf("slot %d: lease left %v, want within (0, %v]", i, st.TTL, policy.Lease)
			}
		}
		if st.Status != want {
			t.Errorf("slot %d: %q, want %q", i, st.Status, want)
		}
	}
}
