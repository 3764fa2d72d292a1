package locktest

import (
	"context"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/slotd/slotd/lock"
)

// The cases of lock.Peeker, the store on which a replica defers without a
// watch per slot; a store without it skips them.

// A store that reports every slot's releases to one function
// (lock.Peeker) names the released slot (a release, one with a
// retry backoff, an operator's rerun), and says nothing of a completion
// or of a stopped watcher.
func testReleaseNotice(t *testing.T, h Harness) {
	rw, ok := h.Store.(lock.Peeker)
	if !ok {
		t.Skip("the store has no lock.Peeker")
	}
	ctx := context.Background()
	slot, done, backoff := UniqueSlot(t, h), UniqueSlot(t, h), UniqueSlot(t, h)
	heard := make(chan lock.Slot, 16)
	stop := rw.WatchReleases(func(task, id string) {
		if task == slot.Task || task == done.Task || task == backoff.Task { // other tests release too
			heard <- lock.Slot{Task: task, ID: id}
		}
	})
	defer stop()
	hear := func(want lock.Slot, what string) {
		t.Helper()
		select {
		case got := <-heard:
			if got.Task != want.Task || got.ID != want.ID {
				t.Fatalf("heard a release of %s, want %s's (%s; the completed %s is no release)", got, want, what, done)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no release heard within 5s: %s of %s", what, want)
		}
	}
	c := mustClaim(t, h, done, "a", lock.Won)
	if err := h.Store.Complete(ctx, done, lock.Owner{ID: "a", Attempt: c.Attempt}, time.Hour); err != nil {
		t.Fatal(err)
	}
	c = mustClaim(t, h, slot, "a", lock.Won)
	if err := h.Store.Release(ctx, slot, lock.Owner{ID: "a", Attempt: c.Attempt}); err != nil {
		t.Fatal(err)
	}
	hear(slot, "a release")
	c = mustClaim(t, h, backoff, "a", lock.Won)
	if err := h.Store.ReleaseAfter(ctx, backoff, lock.Owner{ID: "a", Attempt: c.Attempt}, time.Minute); err != nil {
		t.Fatal(err)
	}
	hear(backoff, "a release with a retry backoff")
	if r, err := h.Store.Rerun(ctx, done, false); err != nil || !r.Cleared {
		t.Fatalf("rerun of %s: %+v, %v", done, r, err)
	}
	hear(done, "an operator's rerun")
	stop()
	stop()
	c = mustClaim(t, h, slot, "b", lock.Won)
	if err := h.Store.Release(ctx, slot, lock.Owner{ID: "b", Attempt: c.Attempt}); err != nil {
		t.Fatal(err)
	}
	// A second watcher, started after the first stopped, hears this
	// release only: by then the first has had as long to (wrongly) hear it.
	again := make(chan struct{}, 1)
	stop2 := rw.WatchReleases(func(task, _ string) {
		if task == slot.Task {
			select {
			case again <- struct{}{}:
			default:
			}
		}
	})
	defer stop2()
	c = mustClaim(t, h, slot, "c", lock.Won)
	if err := h.Store.Release(ctx, slot, lock.Owner{ID: "c", Attempt: c.Attempt}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-again:
	case <-time.After(5 * time.Second):
		t.Fatal("a second watcher heard no release within 5s")
	}
	select {
	case got := <-heard:
		t.Errorf("a stopped watcher heard a release of %s", got)
	default:
	}
}

// A store that peeks (lock.Peeker) also reads each slot's status as States
// does, and a running slot's remaining lease: every one's, or those asked
// for (a slot whose lease surely outlasts its window needs none read).
func testPeek(t *testing.T, h Harness) {
	pk, ok := h.Store.(lock.Peeker)
	if !ok {
		t.Skip("the store has no lock.Peeker")
	}
	ctx := context.Background()
	free, running, done, backoff, unasked := UniqueSlot(t, h), UniqueSlot(t, h), UniqueSlot(t, h), UniqueSlot(t, h), UniqueSlot(t, h)
	mustClaim(t, h, running, "a", lock.Won)
	mustClaim(t, h, unasked, "a", lock.Won)
	c := mustClaim(t, h, done, "a", lock.Won)
	if err := h.Store.Complete(ctx, done, lock.Owner{ID: "a", Attempt: c.Attempt}, time.Hour); err != nil {
		t.Fatal(err)
	}
	c = mustClaim(t, h, backoff, "a", lock.Won)
	if err := h.Store.ReleaseAfter(ctx, backoff, lock.Owner{ID: "a", Attempt: c.Attempt}, time.Minute); err != nil {
		t.Fatal(err)
	}
	slots := []lock.Slot{free, running, done, backoff, unasked}
	want := []string{"free", "running", "done", "backoff", "running"}
	for _, ttl := range [][]bool{nil, {true, true, true, true, false}} {
		sts, err := pk.Peek(ctx, slots, ttl)
		if err != nil {
			t.Fatal(err)
		}
		if len(sts) != len(want) {
			t.Fatalf("peek at %d slots (TTLs asked %v): %d answers", len(want), ttl, len(sts))
		}
		for i, st := range sts {
			if st.Status != want[i] {
				t.Errorf("slot %d (TTLs asked %v): status %q, want %q", i, ttl, st.Status, want[i])
			}
		}
		asked := []int{1, 4}
		if ttl != nil {
			asked = asked[:1] // the last slot's TTL may read 0: it was not asked
		}
		for _, i := range asked {
			if got := sts[i].TTL; got <= 0 || got > h.Policy.Lease {
				t.Errorf("running slot %d (TTLs asked %v): lease left %v, want within (0, %v]", i, ttl, got, h.Policy.Lease)
			}
		}
		if got := sts[4].TTL; got < 0 || got > h.Policy.Lease {
			t.Errorf("running slot, its TTL not asked: lease left %v, want 0 or within (0, %v]", got, h.Policy.Lease)
		}
	}
	if _, err := pk.Peek(ctx, slots, []bool{true}); err == nil {
		t.Error("a peek at 5 slots with 1 TTL flag: no error")
	}
}

// A store that peeks (lock.Peeker) keeps tallies too: it reads back each replica's sum
// for one fire time, 0 for a replica that wrote none or for another time,
// the latest of two writes, and none once its TTL has passed.
func testTally(t *testing.T, h Harness) {
	tl, ok := h.Store.(lock.Peeker)
	if !ok {
		t.Skip("the store has no lock.Peeker")
	}
	ctx := context.Background()
	at := UniqueSlot(t, h).Time
	ttl := 2 * time.Second // etcd's unit is a second
	for _, w := range []struct {
		id  string
		sum uint64
	}{{"a", 1}, {"a", 42}, {"b", math.MaxUint64}} {
		if err := tl.Tally(ctx, at, w.id, w.sum, ttl); err != nil {
			t.Fatal(err)
		}
	}
	got, err := tl.Tallies(ctx, at, []string{"b", "c", "a"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []uint64{math.MaxUint64, 0, 42}; !slices.Equal(got, want) {
		t.Fatalf("tallies of b, c, a: %v, want %v", got, want)
	}
	if got, err := tl.Tallies(ctx, at.Add(time.Millisecond), []string{"a"}); err != nil || !slices.Equal(got, []uint64{0}) {
		t.Fatalf("a's tally a millisecond later: %v, %v; want [0]", got, err)
	}
	h.Expire(2 * ttl) // a store may keep it a little longer than its TTL (etcd's expiry buckets)
	if got, err := tl.Tallies(ctx, at, []string{"a", "b"}); err != nil || !slices.Equal(got, []uint64{0, 0}) {
		t.Fatalf("tallies after their TTL: %v, %v; want [0 0]", got, err)
	}
}
