package redislock_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/locktest"
	"github.com/slotd/slotd/lock/memlock"
	"github.com/slotd/slotd/lock/redislock"
)

// Issue 16 item 7: two processes with one replica id carry distinct owner
// ids (<replica>#<instance>), so neither can renew, complete or release the
// other's claim; status still names the replica.
func TestOwnerInstanceIsPartOfTheLease(t *testing.T) {
	srv := redistest.Start(t)
	r := redislock.New(srv.Client(), "slotd")
	defer r.Close()
	for name, s := range map[string]lock.Store{"redis": r, "memory": memlock.New(nil)} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			now := time.Now()
			slot := lock.Slot{Task: "owner-" + name, ID: "1", Time: now.Add(-time.Second), Deadline: now.Add(time.Minute)}
			pol := lock.Policy{Lease: 5 * time.Second, DoneTTL: time.Hour, MaxAttempts: 3}
			c, err := s.Claim(ctx, slot, lock.OwnerID("r1", "aaaa"), pol)
			if err != nil || c.Result != lock.Won {
				t.Fatalf("claim: %v %v", c.Result, err)
			}
			other := lock.Owner{ID: lock.OwnerID("r1", "bbbb"), Attempt: c.Attempt}
			if err := s.Renew(ctx, slot, other, pol.Lease); !errors.Is(err, lock.ErrNotHeld) {
				t.Errorf("renew by r1#bbbb: %v, want ErrNotHeld", err)
			}
			if err := s.Complete(ctx, slot, other, pol.DoneTTL); !errors.Is(err, lock.ErrNotHeld) {
				t.Errorf("complete by r1#bbbb: %v, want ErrNotHeld", err)
			}
			if err := s.Release(ctx, slot, other); !errors.Is(err, lock.ErrNotHeld) {
				t.Errorf("release by r1#bbbb: %v, want ErrNotHeld", err)
			}
			st, err := lock.ReadState(ctx, s, slot)
			if err != nil || st.Status != "running" || st.Holder != "r1" || st.Instance != "aaaa" || st.Attempt != 1 {
				t.Errorf("state %+v, %v: want running by r1 (instance aaaa), attempt 1", st, err)
			}
			held, err := s.Claim(ctx, slot, lock.OwnerID("r1", "bbbb"), pol)
			if err != nil || held.Result != lock.Held || held.Holder != "r1" || held.Instance != "aaaa" {
				t.Errorf("claim by r1#bbbb: %+v, %v: want held by r1 instance aaaa", held, err)
			}
			mine := lock.Owner{ID: lock.OwnerID("r1", "aaaa"), Attempt: c.Attempt}
			if err := s.Renew(ctx, slot, mine, pol.Lease); err != nil {
				t.Errorf("renew by the holder: %v", err)
			}
			if err := s.Complete(ctx, slot, mine, pol.DoneTTL); err != nil {
				t.Errorf("complete by the holder: %v", err)
			}
		})
	}
}

func TestFleetRedis(t *testing.T) {
	srv := redistest.Start(t)
	r := redislock.New(srv.Client(), "slotd")
	defer r.Close()
	ctx := context.Background()
	var f lock.Fleet = r
	if p, err := f.Announce(ctx, "r1", "aaaa", time.Minute); err != nil || p.Other != "" {
		t.Fatalf("first announce: %+v %v", p, err)
	}
	if p, err := f.Announce(ctx, "r1", "aaaa", time.Minute); err != nil || p.Other != "" {
		t.Fatalf("renewal: %+v %v", p, err)
	}
	p, err := f.Announce(ctx, "r1", "bbbb", time.Minute)
	if err != nil || p.Other != "aaaa" || p.TTL <= 0 || p.TTL > time.Minute {
		t.Fatalf("announce by another instance: %+v %v, want held by aaaa", p, err)
	}
	if err := f.Withdraw(ctx, "r1", "bbbb"); err != nil {
		t.Fatal(err)
	}
	if v := srv.Client().Get(ctx, redislock.ReplicaKey("slotd", "r1")).Val(); v != "aaaa" {
		t.Fatalf("withdraw by a non-holder changed the presence to %q", v)
	}
	if err := f.Withdraw(ctx, "r1", "aaaa"); err != nil {
		t.Fatal(err)
	}
	if n := srv.Client().Exists(ctx, redislock.ReplicaKey("slotd", "r1")).Val(); n != 0 {
		t.Fatal("presence not withdrawn by its holder")
	}

	if first, err := f.FirstStart(ctx); err != nil || !first.IsZero() {
		t.Fatalf("first start before any: %v %v", first, err)
	}
	t0 := time.UnixMilli(time.Now().UnixMilli()).UTC()
	if got, err := f.Started(ctx, t0); err != nil || !got.Equal(t0) {
		t.Fatalf("Started: %v %v, want %v", got, err, t0)
	}
	if got, err := f.Started(ctx, t0.Add(time.Hour)); err != nil || !got.Equal(t0) {
		t.Fatalf("second Started: %v %v, want the first, %v", got, err, t0)
	}
	if got, err := f.FirstStart(ctx); err != nil || !got.Equal(t0) {
		t.Fatalf("FirstStart: %v %v, want %v", got, err, t0)
	}
	if ttl := srv.Client().PTTL(ctx, redislock.FirstStartKey("slotd")).Val(); ttl <= 0 || ttl > lock.FirstStartTTL {
		t.Fatalf("first-start TTL %v", ttl)
	}
}

// On Redlock every node holds the presence; another instance on any node
// that answers is reported, and the earliest first start wins.
func TestFleetRedlock(t *testing.T) {
	_, clients := startNodes(t, 3)
	r := newRedlock(t, clients)
	ctx := context.Background()
	if p, err := r.Announce(ctx, "r1", "aaaa", time.Minute); err != nil || p.Other != "" {
		t.Fatalf("first announce: %+v %v", p, err)
	}
	// One node lost its data (restarted empty): still refused.
	clients[0].FlushAll(ctx)
	if p, err := r.Announce(ctx, "r1", "bbbb", time.Minute); err != nil || p.Other != "aaaa" {
		t.Fatalf("announce by another instance: %+v %v, want held by aaaa", p, err)
	}
	t0 := time.UnixMilli(time.Now().UnixMilli()).UTC()
	if err := clients[1].Set(ctx, redislock.FirstStartKey("slotd"), t0.Add(-time.Hour).UnixMilli(), time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := r.Started(ctx, t0); err != nil || !got.Equal(t0.Add(-time.Hour)) {
		t.Fatalf("Started: %v %v, want the earliest record %v", got, err, t0.Add(-time.Hour))
	}
	if got, err := r.FirstStart(ctx); err != nil || !got.Equal(t0.Add(-time.Hour)) {
		t.Fatalf("FirstStart: %v %v", got, err)
	}
}

// Announce lists the live replica ids on Redis: those announced and not
// withdrawn or expired, the caller's included; the set key expires with its
// last member. A withdrawal by an instance that no longer holds the id
// leaves the id live. Redlock lists none (it has no preferred claimant).
func TestFleetLive(t *testing.T) {
	srv := redistest.Start(t)
	r := redislock.New(srv.Client(), "slotd")
	defer r.Close()
	ctx := context.Background()
	live := func(replica, instance string, ttl time.Duration) []string {
		t.Helper()
		p, err := r.Announce(ctx, replica, instance, ttl)
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(p.Live)
		return p.Live
	}
	if got := live("r1", "a", time.Minute); !slices.Equal(got, []string{"r1"}) {
		t.Errorf("first announce: live %v, want [r1]", got)
	}
	live("short", "s", 50*time.Millisecond)
	if got := live("r2", "b", time.Minute); !slices.Equal(got, []string{"r1", "r2", "short"}) {
		t.Errorf("three announced: live %v, want [r1 r2 short]", got)
	}
	time.Sleep(60 * time.Millisecond) // the short presence's TTL, on the server's clock
	if got := live("r2", "b", time.Minute); !slices.Equal(got, []string{"r1", "r2"}) {
		t.Errorf("after a TTL ran out: live %v, want [r1 r2]", got)
	}
	if err := r.Withdraw(ctx, "r1", "a"); err != nil {
		t.Fatal(err)
	}
	if got := live("r2", "b", time.Minute); !slices.Equal(got, []string{"r2"}) {
		t.Errorf("after r1 withdrew: live %v, want [r2]", got)
	}
	// A process restarted with r1's id announces; the old instance's
	// withdrawal, coming after, leaves the new one live.
	live("r1", "a2", time.Minute)
	if err := r.Withdraw(ctx, "r1", "a"); err != nil {
		t.Fatal(err)
	}
	if got := live("r2", "b", time.Minute); !slices.Equal(got, []string{"r1", "r2"}) {
		t.Errorf("after the old instance of r1 withdrew late: live %v, want [r1 r2] (the new instance stays)", got)
	}
	if err := r.Withdraw(ctx, "r1", "a2"); err != nil {
		t.Fatal(err)
	}
	if ttl := srv.Client().PTTL(ctx, "slotd:fleet").Val(); ttl <= 0 || ttl > time.Minute {
		t.Errorf("fleet key TTL %v, want at most the last member's minute", ttl)
	}

	rl, err := redislock.NewRedlock([]redislock.Client{srv.Client()}, "rl")
	if err != nil {
		t.Fatal(err)
	}
	defer rl.Close()
	if p, err := rl.Announce(ctx, "r1", "a", time.Minute); err != nil || p.Live != nil {
		t.Errorf("redlock announce: live %v, %v; want nil", p.Live, err)
	}
}

// OnFleetChange hears each change of the live set's members, from any
// store on the server: a first announce, an expired member dropped, a
// withdrawal; a renewal changes no member and is not heard. Pub/sub keeps
// one publisher's order, so the count after the withdrawal's notice shows
// that the renewal before it sent none.
func TestFleetChangeNotifies(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	listener := redislock.New(srv.Client(), "slotd")
	defer listener.Close()
	heard := make(chan struct{}, 16)
	stop := listener.OnFleetChange(func() { heard <- struct{}{} })
	if err := listener.Subscribe(ctx); err != nil {
		t.Fatal(err)
	}
	other := redislock.New(srv.Client(), "slotd")
	defer other.Close()
	announce := func(replica string, ttl time.Duration) {
		t.Helper()
		if _, err := other.Announce(ctx, replica, replica+"-instance", ttl); err != nil {
			t.Fatal(err)
		}
	}
	await := func(what string) {
		t.Helper()
		select {
		case <-heard:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: no fleet change heard in 5s", what)
		}
	}
	announce("r1", time.Minute)
	await("r1 joined")
	announce("r1", time.Minute) // a renewal: no notice
	announce("short", 50*time.Millisecond)
	await("short joined")
	time.Sleep(60 * time.Millisecond) // short's TTL, on the server's clock
	announce("r1", time.Minute)       // drops the expired member
	await("short expired")
	if err := other.Withdraw(ctx, "r1", "r1-instance"); err != nil {
		t.Fatal(err)
	}
	await("r1 withdrew")
	if n := len(heard); n != 0 {
		t.Errorf("%d notices more than the changes (a renewal was heard)", n)
	}
	stop()
	announce("r2", time.Minute)
	if err := other.Withdraw(ctx, "r2", "r2-instance"); err != nil {
		t.Fatal(err)
	}
	// After stop nothing more: a notice would have come by the time a
	// round trip through the same subscription answers.
	if err := listener.Subscribe(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Client().Publish(ctx, "slotd:done", "fleet").Result(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // absence of a call: bounded wait, nothing to await
	if n := len(heard); n != 0 {
		t.Errorf("%d notices after stop", n)
	}
}

// TestFleetConformance runs the fleet's suite (locktest.RunFleet) on every
// store of this package: one server, a 3-master Cluster (the presence and
// first-start keys hash where they like; the live set is one key) and
// Redlock (a quorum's presence, the earliest first start, no live set).
func TestFleetConformance(t *testing.T) {
	t.Parallel()
	stores := map[string]func(*testing.T) locktest.Harness{
		"redis":   redisHarness,
		"redlock": redlockHarness,
		"cluster": func(t *testing.T) locktest.Harness {
			rdb := redistest.StartCluster(t, 3).Client()
			keys := func() []string {
				var out []string
				for k := range clusterKeys(t, rdb) {
					out = append(out, k)
				}
				return out
			}
			return clientHarness(t, rdb, redislock.New(rdb, "slotd"), keys)
		},
	}
	for name, mk := range stores {
		t.Run(name, func(t *testing.T) { locktest.RunFleet(t, mk(t), 2*time.Second) })
	}
}
