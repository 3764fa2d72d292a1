package locktest

// The slot's state as it is read back, and the markers over it: a rerun
// of a done slot, the states of many slots in one read, and Once.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slotd/slotd/lock"
)

func testState(t *testing.T, h Harness) {
	ctx := context.Background()
	slot := UniqueSlot(t, h)
	if st, err := lock.ReadState(ctx, h.Store, slot); err != nil || st.Status != "free" || st.Attempts != 0 {
		t.Fatalf("fresh state = %+v, %v", st, err)
	}
	c := mustClaim(t, h, slot, "host-1:42", lock.Won) // replica ids may hold colons
	st, err := lock.ReadState(ctx, h.Store, slot)
	if err != nil || st.Status != "running" || st.Holder != "host-1:42" || st.Attempt != 1 || st.Attempts != 1 || st.TTL <= 0 {
		t.Fatalf("running state = %+v, %v", st, err)
	}
	if err := h.Store.Complete(ctx, slot, lock.Owner{ID: "host-1:42", Attempt: c.Attempt}, h.Policy.DoneTTL); err != nil {
		t.Fatal(err)
	}
	st, err = lock.ReadState(ctx, h.Store, slot)
	if err != nil || st.Status != "done" || st.Holder != "host-1:42" || st.Finished.IsZero() {
		t.Fatalf("done state = %+v, %v", st, err)
	}
	if d := st.Finished.Sub(h.Now()); d > time.Second || d < -time.Minute {
		t.Fatalf("finished %v, not near the store's now %v", st.Finished, h.Now())
	}
}

func testRerun(t *testing.T, h Harness) {
	ctx := context.Background()
	slot := UniqueSlot(t, h)
	w := h.Store.Watch(slot)
	defer w.Stop()
	c := mustClaim(t, h, slot, "a", lock.Won)
	if r, err := h.Store.Rerun(ctx, slot, false); err != nil || r.Cleared || r.Refused != "running" || r.TTL <= 0 {
		t.Fatalf("rerun of a running slot = %+v, %v; want refused as running", r, err)
	}
	if st, _ := lock.ReadState(ctx, h.Store, slot); st.Status != "running" {
		t.Fatalf("refused rerun changed the state: %+v", st)
	}
	if err := h.Store.Complete(ctx, slot, lock.Owner{ID: "a", Attempt: c.Attempt}, h.Policy.DoneTTL); err != nil {
		t.Fatal(err)
	}
	r, err := h.Store.Rerun(ctx, slot, false)
	if err != nil || !r.Cleared || r.Attempts != 1 || !strings.HasPrefix(r.Previous, "done:a:1:") {
		t.Fatalf("rerun of a done slot = %+v, %v", r, err)
	}
	select {
	case <-w.C():
	case <-time.After(5 * time.Second):
		t.Fatal("rerun did not wake the slot's watcher")
	}
	// A full set of attempts again, numbered on from the first run's, so
	// that every token stays above every earlier one.
	for i := 2; i <= 1+h.Policy.MaxAttempts; i++ {
		c := mustClaim(t, h, slot, "b", lock.Won)
		if c.Attempt != i || c.Base != 1 {
			t.Fatalf("claim after rerun: attempt %d base %d, want %d and 1", c.Attempt, c.Base, i)
		}
		if err := h.Store.Release(ctx, slot, lock.Owner{ID: "b", Attempt: i}); err != nil {
			t.Fatal(err)
		}
	}
	mustClaim(t, h, slot, "b", lock.Exhausted)
	for k, ttl := range h.TTLs() {
		if strings.Contains(k, slot.Task) && ttl <= 0 {
			t.Errorf("key %q has no TTL after a rerun", k)
		}
	}
	// An exhausted slot can be rerun too; force clears a running one.
	if r, err := h.Store.Rerun(ctx, slot, false); err != nil || !r.Cleared || r.Attempts != 4 {
		t.Fatalf("rerun of an exhausted slot = %+v, %v", r, err)
	}
	c = mustClaim(t, h, slot, "c", lock.Won)
	if r, err := h.Store.Rerun(ctx, slot, true); err != nil || !r.Cleared {
		t.Fatalf("forced rerun of a running slot = %+v, %v", r, err)
	}
	if err := h.Store.Renew(ctx, slot, lock.Owner{ID: "c", Attempt: c.Attempt}, h.Policy.Lease); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("renew after a forced rerun: %v, want ErrNotHeld", err)
	}
}

func testStates(t *testing.T, h Harness) {
	ctx := context.Background()
	free, running, done, foreign := UniqueSlot(t, h), UniqueSlot(t, h), UniqueSlot(t, h), UniqueSlot(t, h)
	mustClaim(t, h, running, "r", lock.Won)
	c := mustClaim(t, h, done, "d", lock.Won)
	if err := h.Store.Complete(ctx, done, lock.Owner{ID: "d", Attempt: c.Attempt}, h.Policy.DoneTTL); err != nil {
		t.Fatal(err)
	}
	h.PlantState(foreign, "garbage")
	sts, err := h.Store.States(ctx, []lock.Slot{free, running, done, foreign})
	if !errors.Is(err, lock.ErrForeign) {
		t.Fatalf("States over a foreign key: err = %v, want ErrForeign", err)
	}
	want := []string{"free", "running", "done", "foreign"}
	for i, st := range sts {
		if st.Status != want[i] {
			t.Errorf("slot %d: status %q, want %q (%+v)", i, st.Status, want[i], st)
		}
	}
	if sts[1].Holder != "r" || sts[1].TTL <= 0 || sts[2].Holder != "d" || sts[2].Attempts != 1 {
		t.Errorf("States = %+v", sts)
	}
	for i, slot := range []lock.Slot{free, running, done} {
		one, err := lock.ReadState(ctx, h.Store, slot)
		if err != nil || one.Status != sts[i].Status || one.Holder != sts[i].Holder {
			t.Errorf("State(%s) = %+v, %v; States said %+v", slot, one, err, sts[i])
		}
	}
}

func testOnce(t *testing.T, h Harness) {
	o, ok := h.Store.(lock.Oncer)
	if !ok {
		t.Skipf("%T has no once marker (lock.Oncer): on_failure hooks do not run on it", h.Store)
	}
	ctx := context.Background()
	slot := UniqueSlot(t, h)
	// Expire(ttl) must not clear the other tests' done markers (an hour
	// by DefaultPolicy); two leases, for a store whose TTLs run in real
	// time with a short lease.
	ttl := min(time.Minute, 2*h.Policy.Lease)

	// Racing callers: at most one sets it (a quorum store may split the
	// vote, and then none does).
	const n = 16
	var set atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			first, err := o.Once(ctx, slot, "raced", fmt.Sprintf("r%d", i), ttl)
			switch {
			case err != nil && (h.Split == nil || !h.Split(err)):
				t.Errorf("once by r%d: %v", i, err)
			case first:
				set.Add(1)
			}
		}()
	}
	close(start)
	wg.Wait()
	if got := set.Load(); got > 1 {
		t.Fatalf("%d of %d racing callers set the marker, want at most one", got, n)
	}

	// One after another: the first sets it, the next does not; another
	// event of the same slot has a marker of its own.
	for i, want := range []bool{true, false} {
		first, err := o.Once(ctx, slot, "failure", fmt.Sprintf("r%d", i), ttl)
		if err != nil || first != want {
			t.Fatalf("once #%d = %v, %v; want %v", i+1, first, err, want)
		}
	}
	if first, err := o.Once(ctx, slot, "other", "r", ttl); err != nil || !first {
		t.Fatalf("once of another event = %v, %v; want true", first, err)
	}
	for k, left := range h.TTLs() {
		if strings.Contains(k, slot.Task) && (left <= 0 || left > ttl) {
			t.Errorf("key %q: TTL %v, want in (0, %v]", k, left, ttl)
		}
	}
	h.Expire(ttl)
	if first, err := o.Once(ctx, slot, "failure", "r", ttl); err != nil || !first {
		t.Fatalf("once after the marker expired = %v, %v; want true", first, err)
	}
	if _, err := o.Once(ctx, slot, "failure", "r", 0); err == nil {
		t.Error("once with no TTL: no error")
	}
}
