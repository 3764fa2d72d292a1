package scheduler_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/internal/testlane"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/memlock"
	"github.com/slotd/slotd/lock/redislock"
	"github.com/slotd/slotd/scheduler"
	"github.com/slotd/slotd/tasks"
)

// Issue 16 item 8: catchup = "latest" at first start ran a leap-day task's
// 2024 slot and an @every 9223372036s task's 1970 slot, both windows still
// open. catchup_limit (config default 24h) bounds catch-up; without it
// (the old behaviour) both run, which shows the test sees the catch-up.
func TestCatchupLimit(t *testing.T) {
	testlane.Parallel(t, lightLane)
	for _, tc := range []struct {
		name, spec string
	}{
		{"leap-day", "0 0 29 2 *"},
		{"every-1970", "@every 9223372036s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, limit := range []time.Duration{24 * time.Hour, 0} {
				l := newLedger()
				task := testTask(t, tc.name, tc.spec, l.job(ok), func(t *scheduler.Task) {
					t.Catchup, t.CatchupLimit, t.DoneTTL = scheduler.CatchupLatest, limit, 24*time.Hour
				})
				rep := startReplica(t, "solo", memlock.New(nil), time.Second, []scheduler.Task{task})
				if limit == 0 {
					rs := l.await(t, "the caught-up slot without a limit", 10*time.Second, func(rs []record) bool { return len(rs) > 0 })
					t.Logf("without catchup_limit: caught up slot %s (%v)", rs[0].run.Slot, rs[0].run.SlotTime)
				} else {
					time.Sleep(time.Second) // the absence of a run observed, not a wait for an event
				}
				rep.stop()
				if rs := l.snapshot(); limit > 0 && len(rs) > 0 {
					t.Errorf("catchup_limit %v: caught up slot %s (%v)", limit, rs[0].run.Slot, rs[0].run.SlotTime)
				}
			}
		})
	}
}

// Issue 16 item 7: two processes with one replica id must not share lease
// owners. Each scheduler owns its claims as <replica>#<instance>.
func TestSameReplicaIDDistinctOwners(t *testing.T) {
	store := memlock.New(nil)
	a := scheduler.New(nil, store, scheduler.WithReplica("dup"))
	b := scheduler.New(nil, store, scheduler.WithReplica("dup"))
	if a.Instance() == "" || a.Instance() == b.Instance() {
		t.Fatalf("instances %q and %q: want distinct nonces", a.Instance(), b.Instance())
	}
	slot := lock.Slot{Task: "t", ID: "1", Time: time.Now().Add(-time.Second), Deadline: time.Now().Add(time.Minute)}
	pol := lock.Policy{Lease: 5 * time.Second, DoneTTL: time.Hour, MaxAttempts: 3}
	c, err := store.Claim(context.Background(), slot, lock.OwnerID("dup", a.Instance()), pol)
	if err != nil || c.Result != lock.Won {
		t.Fatalf("claim: %v %v", c.Result, err)
	}
	err = store.Renew(context.Background(), slot, lock.Owner{ID: lock.OwnerID("dup", b.Instance()), Attempt: c.Attempt}, pol.Lease)
	if !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("renew by the other instance of dup: %v, want ErrNotHeld", err)
	}
}

// A second live process with a replica id already announced is refused at
// start; once the first stops (and withdraws its id), the id is free.
func TestDuplicateReplicaRefused(t *testing.T) {
	srv := redistest.Start(t)
	store := func() lock.Store {
		r := redislock.New(srv.Client(), "slotd")
		t.Cleanup(func() { r.Close() })
		return r
	}
	first := startReplica(t, "dup", store(), time.Second, nil, scheduler.WithClockCheck(200*time.Millisecond))
	key := redislock.ReplicaKey("slotd", "dup")
	deadline := time.Now().Add(5 * time.Second)
	for srv.Client().Get(context.Background(), key).Val() != first.sched.Instance() {
		if time.Now().After(deadline) {
			t.Fatalf("%s never held the first instance %s", key, first.sched.Instance())
		}
		time.Sleep(10 * time.Millisecond)
	}

	second := scheduler.New(nil, store(), scheduler.WithReplica("dup"), scheduler.WithClockCheck(200*time.Millisecond),
		scheduler.WithLogger(slog.New(slog.NewTextHandler(testWriter{t}, nil))))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	err := second.Run(ctx)
	if !errors.Is(err, scheduler.ErrDuplicateReplica) {
		t.Fatalf("second Run with replica id dup: %v, want ErrDuplicateReplica", err)
	}
	t.Logf("refused after %v: %v", time.Since(start).Round(time.Millisecond), err)

	first.stop()
	if v := srv.Client().Exists(context.Background(), key).Val(); v != 0 {
		t.Fatalf("%s still exists after the first replica stopped", key)
	}
	third := startReplica(t, "dup", store(), time.Second, nil, scheduler.WithClockCheck(200*time.Millisecond))
	third.stop()
}

// A crashed process's presence (not renewed) does not block a restart with
// the same id for longer than its TTL.
func TestStaleReplicaIDTakenOver(t *testing.T) {
	srv := redistest.Start(t)
	key := redislock.ReplicaKey("slotd", "dup")
	if err := srv.Client().Set(context.Background(), key, "crashed", 700*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	r := redislock.New(srv.Client(), "slotd")
	defer r.Close()
	s := scheduler.New(nil, r, scheduler.WithReplica("dup"), scheduler.WithClockCheck(200*time.Millisecond),
		scheduler.WithLogger(slog.New(slog.NewTextHandler(testWriter{t}, nil))))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for srv.Client().Get(context.Background(), key).Val() != s.Instance() {
		if time.Now().After(deadline) {
			t.Fatalf("%s never taken over from the crashed instance", key)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// A replica that stops cleanly leaves the fleet's live set as soon as its
// Run is cancelled — while its attempt still has the shutdown grace, long
// before its presence (30s, three default clock checks) would run out —
// and its peer's view drops it as soon as the peer hears the withdrawal
// (lock.Fleet.OnFleetChange; the peer checks its clock every 50 ms here
// too), so that the peer no longer defers the leaver's preferred slots to
// it.
func TestCleanShutdownLeavesFleetAtOnce(t *testing.T) {
	srv := redistest.Start(t)
	store := func() lock.Store {
		r := redislock.New(srv.Client(), "slotd")
		if err := r.Subscribe(context.Background()); err != nil { // Live is listed with Taken notices only
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		return r
	}
	l := newLedger()
	release := make(chan struct{})
	hold := testTask(t, "hold", "@every 1s", l.job(func(ctx context.Context, _ tasks.Run) error {
		<-release // runs past the leaver's cancel, within its grace
		return nil
	}), func(t *scheduler.Task) { t.Deadline = time.Minute; t.Lease = time.Minute })
	a := startReplica(t, "a", store(), time.Minute, []scheduler.Task{hold})
	done := sync.OnceFunc(func() { close(release) })
	t.Cleanup(done) // before a's stop (cleanups run last first): a failed check does not wait out the grace
	b := startReplica(t, "b", store(), time.Second, nil, scheduler.WithClockCheck(50*time.Millisecond))

	ctx := context.Background()
	awaitLive := func(what string, want ...string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for got := b.sched.LiveView(); !slices.Equal(got, want); got = b.sched.LiveView() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: b's view of the live set %v, want %v", what, got, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	awaitLive("both started", "a", "b")
	l.await(t, "a to start its attempt", 10*time.Second, func(rs []record) bool { return len(rs) > 0 })
	expiry := srv.Client().ZScore(ctx, "slotd:fleet", "a").Val()
	if left := time.Until(time.UnixMilli(int64(expiry))); left < 20*time.Second {
		t.Fatalf("a's live-set entry expires in %v, want about 30s (three default clock checks)", left)
	}

	a.cancel() // SIGTERM; its attempt goes on within the grace
	awaitLive("a stopped", "b")
	if live := srv.Client().ZRange(ctx, "slotd:fleet", 0, -1).Val(); !slices.Equal(live, []string{"b"}) {
		t.Errorf("live set in Redis after a stopped: %v, want [b]", live)
	}
	select {
	case <-a.done:
		t.Fatal("a's Run returned with its attempt still running: the test shows nothing about the grace")
	default:
	}
	done()
	a.stop()
}

// A replica that joins is in its peers' live set as soon as they hear of
// it (lock.Fleet.OnFleetChange), not at their next clock check: with a
// check every hour here, both replicas' views hold both within seconds,
// and a replica that leaves is out of them as fast.
func TestJoinAndLeaveHeardAtOnce(t *testing.T) {
	srv := redistest.Start(t)
	store := func() lock.Store {
		r := redislock.New(srv.Client(), "slotd")
		if err := r.Subscribe(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		return r
	}
	awaitView := func(what string, rep *replica, want ...string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for got := rep.sched.LiveView(); !slices.Equal(got, want); got = rep.sched.LiveView() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the view of the live set %v, want %v", what, got, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	a := startReplica(t, "a", store(), time.Second, nil, scheduler.WithClockCheck(time.Hour))
	awaitView("a alone", a, "a")
	b := startReplica(t, "b", store(), time.Second, nil, scheduler.WithClockCheck(time.Hour))
	awaitView("b joined, seen by a", a, "a", "b")
	awaitView("b joined, seen by b", b, "a", "b")
	c := startReplica(t, "c", store(), time.Second, nil, scheduler.WithClockCheck(time.Hour))
	awaitView("c joined, seen by a", a, "a", "b", "c")
	c.stop()
	awaitView("c left, seen by a", a, "a", "b")
	awaitView("c left, seen by b", b, "a", "b")
}
