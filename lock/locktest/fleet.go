package locktest

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slotd/slotd/lock"
)

// RunFleet runs the fleet's conformance tests (lock.Fleet: the replica
// ids' presence, the live set, the first start) against h, whose store
// must implement lock.Fleet, each as a subtest. ttl is the presence TTL
// the tests announce with: short, since one of them lets it run out with
// Expire (on a store whose TTLs run in real time, a couple of seconds).
func RunFleet(t *testing.T, h Harness, ttl time.Duration) {
	f, ok := h.Store.(lock.Fleet)
	if !ok {
		t.Fatalf("%T does not implement lock.Fleet", h.Store)
	}
	for _, tc := range fleet {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, h, f, ttl) })
	}
}

var fleet = []struct {
	name string
	run  func(*testing.T, Harness, lock.Fleet, time.Duration)
}{
	{"FirstStartRecordedOnce", testFirstStart},
	{"SecondInstanceOfAnIdRefused", testDuplicateReplica},
	{"ExpiredPresenceFreesTheId", testPresenceExpires},
	{"LiveSetAndItsNotices", testLiveSet},
}

func testFirstStart(t *testing.T, h Harness, f lock.Fleet, _ time.Duration) {
	ctx := context.Background()
	before, err := f.FirstStart(ctx)
	if err != nil {
		t.Fatal(err)
	}
	now := h.Now().Truncate(time.Millisecond)
	got, err := f.Started(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	want := before
	if before.IsZero() {
		want = now
	}
	if !got.Equal(want) {
		t.Fatalf("Started(%v) = %v; want %v (recorded before: %v)", now, got, want, before)
	}
	if again, err := f.Started(ctx, now.Add(time.Hour)); err != nil || !again.Equal(want) {
		t.Fatalf("Started again, an hour on = %v, %v; want the first record %v", again, err, want)
	}
	if read, err := f.FirstStart(ctx); err != nil || !read.Equal(want) {
		t.Fatalf("FirstStart = %v, %v; want %v", read, err, want)
	}
	for k, left := range h.TTLs() {
		if left <= 0 {
			t.Errorf("key %q has no TTL", k)
		}
	}
}

func testDuplicateReplica(t *testing.T, h Harness, f lock.Fleet, ttl time.Duration) {
	ctx := context.Background()
	id := UniqueSlot(t, h).Task
	for i := range 2 {
		if p, err := f.Announce(ctx, id, "inst-a", ttl); err != nil || p.Other != "" {
			t.Fatalf("announce #%d by its holder = %+v, %v; want it held by the caller", i+1, p, err)
		}
	}
	p, err := f.Announce(ctx, id, "inst-b", ttl)
	if err != nil || p.Other != "inst-a" || p.TTL <= 0 || p.TTL > ttl {
		t.Fatalf("announce by a second instance = %+v, %v; want held by inst-a for (0, %v]", p, err, ttl)
	}
	if _, err := f.Announce(ctx, id, "inst-a", ttl); err != nil {
		t.Fatal(err)
	}
	// A withdrawal by the instance that does not hold the id changes nothing.
	if err := f.Withdraw(ctx, id, "inst-b"); err != nil {
		t.Fatal(err)
	}
	if p, err := f.Announce(ctx, id, "inst-b", ttl); err != nil || p.Other != "inst-a" {
		t.Fatalf("after the other's withdrawal: announce = %+v, %v; want still held by inst-a", p, err)
	}
	if err := f.Withdraw(ctx, id, "inst-a"); err != nil {
		t.Fatal(err)
	}
	if p, err := f.Announce(ctx, id, "inst-b", ttl); err != nil || p.Other != "" {
		t.Fatalf("after the holder's withdrawal: announce = %+v, %v; want taken by the caller", p, err)
	}
	if _, err := f.Announce(ctx, id, "inst-b", 0); err == nil {
		t.Error("announce with no TTL: no error")
	}
	for k, left := range h.TTLs() {
		if left <= 0 {
			t.Errorf("key %q has no TTL", k)
		}
	}
}

func testPresenceExpires(t *testing.T, h Harness, f lock.Fleet, ttl time.Duration) {
	ctx := context.Background()
	id := UniqueSlot(t, h).Task
	if p, err := f.Announce(ctx, id, "crashed", ttl); err != nil || p.Other != "" {
		t.Fatalf("announce = %+v, %v", p, err)
	}
	h.Expire(ttl)
	if p, err := f.Announce(ctx, id, "restarted", ttl); err != nil || p.Other != "" {
		t.Fatalf("announce after the holder's TTL ran out = %+v, %v; want taken by the caller", p, err)
	}
}

func testLiveSet(t *testing.T, h Harness, f lock.Fleet, ttl time.Duration) {
	ctx := context.Background()
	a, b := UniqueSlot(t, h).Task, UniqueSlot(t, h).Task
	p, err := f.Announce(ctx, a, "inst-a", ttl)
	if err != nil {
		t.Fatal(err)
	}
	if p.Live == nil {
		var changed atomic.Bool
		stop := f.OnFleetChange(func() { changed.Store(true) })
		if _, err := f.Announce(ctx, b, "inst-b", ttl); err != nil {
			t.Fatal(err)
		}
		stop()
		if changed.Load() {
			t.Error("a store without a live set announced a change of it")
		}
		t.Skipf("%T has no live set (Presence.Live is nil): every replica claims every slot", h.Store)
	}
	if !slices.Contains(p.Live, a) {
		t.Fatalf("live set %v lacks the caller %q", p.Live, a)
	}
	heard := make(chan struct{}, 1)
	stop := f.OnFleetChange(func() {
		select {
		case heard <- struct{}{}:
		default:
		}
	})
	defer stop()
	wantChange := func(what string) {
		t.Helper()
		select {
		case <-heard:
		case <-time.After(5 * time.Second):
			t.Fatalf("no fleet change notice after %s", what)
		}
	}
	if _, err := f.Announce(ctx, b, "inst-b", ttl); err != nil {
		t.Fatal(err)
	}
	wantChange(b + " joined")
	if p, err = f.Announce(ctx, a, "inst-a", ttl); err != nil || !slices.Contains(p.Live, a) || !slices.Contains(p.Live, b) {
		t.Fatalf("live set = %v, %v; want %q and %q in it", p.Live, err, a, b)
	}
	// Drain, so that the next notice awaited is the withdrawal's.
	select {
	case <-heard:
	default:
	}
	if _, err := f.Announce(ctx, b, "inst-b", ttl); err != nil {
		t.Fatal(err)
	}
	if err := f.Withdraw(ctx, b, "inst-b"); err != nil {
		t.Fatal(err)
	}
	wantChange(b + " withdrew")
	if p, err = f.Announce(ctx, a, "inst-a", ttl); err != nil || slices.Contains(p.Live, b) {
		t.Fatalf("live set after %q withdrew = %v, %v", b, p.Live, err)
	}
}
