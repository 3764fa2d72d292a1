package redislock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/locktest"
	"github.com/slotd/slotd/lock/redislock"
)

// policy is the conformance suite's policy, for the other tests too.
var policy = locktest.DefaultPolicy

// clientHarness is the conformance harness over any go-redis client; keys
// lists every key the store holds (on a Cluster: on every master).
func clientHarness(t *testing.T, rdb redis.UniversalClient, r *redislock.Store, keys func() []string) locktest.Harness {
	ctx := context.Background()
	t.Cleanup(func() { r.Close() })
	if err := r.Subscribe(ctx); err != nil {
		t.Fatal(err)
	}
	return locktest.Harness{
		Store: r,
		Now: func() time.Time {
			tm, err := rdb.Time(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			return tm
		},
		Expire: func(d time.Duration) {
			// Redis's clock cannot be moved, so passing time is shown to the
			// keys: each TTL shrinks by d and a key whose TTL runs out goes.
			for _, k := range keys() {
				ttl := rdb.PTTL(ctx, k).Val()
				if ttl <= d {
					rdb.Del(ctx, k)
				} else {
					rdb.PExpire(ctx, k, ttl-d)
				}
			}
		},
		TTLs: func() map[string]time.Duration {
			out := map[string]time.Duration{}
			for _, k := range keys() {
				out[k] = rdb.PTTL(ctx, k).Val()
			}
			return out
		},
		PlantState:    func(s lock.Slot, v string) { st, _ := redislock.Keys("slotd", s); rdb.Set(ctx, st, v, time.Hour) },
		PlantAttempts: func(s lock.Slot, v string) { _, at := redislock.Keys("slotd", s); rdb.Set(ctx, at, v, time.Hour) },
	}
}

// serverKeys lists every key of the one server behind rdb.
func serverKeys(t *testing.T, rdb redis.UniversalClient) func() []string {
	return func() []string {
		ks, err := rdb.Keys(context.Background(), "*").Result()
		if err != nil {
			t.Fatal(err)
		}
		return ks
	}
}

func redisHarness(t *testing.T) locktest.Harness {
	rdb := redistest.Start(t).Client()
	return clientHarness(t, rdb, redislock.New(rdb, "slotd"), serverKeys(t, rdb))
}

// TestConformance runs the one suite against every store of this package.
func TestConformance(t *testing.T) {
	t.Parallel()
	stores := map[string]func(*testing.T) locktest.Harness{
		"redis":   redisHarness,
		"redlock": redlockHarness,
	}
	for name, mk := range stores {
		t.Run(name, func(t *testing.T) { locktest.Run(t, mk(t)) })
	}
}

func mustClaim(t *testing.T, h locktest.Harness, slot lock.Slot, replica string, want lock.Result) lock.Claim {
	t.Helper()
	c, err := h.Store.Claim(context.Background(), slot, replica, policy)
	if err != nil {
		t.Fatalf("claim by %s: %v", replica, err)
	}
	if c.Result != want {
		t.Fatalf("claim by %s = %v, want %v (%+v)", replica, c.Result, want, c)
	}
	return c
}

// The Redis store must hold a claim's keys on one Cluster hash slot.
func TestKeysShareHashTag(t *testing.T) {
	slot := lock.Slot{Task: "report", ID: "2024011514"}
	state, attempts := redislock.Keys("slotd", slot)
	if state != "slotd:{report:2024011514}" || attempts != "slotd:{report:2024011514}:attempts" {
		t.Fatalf("keys = %q, %q", state, attempts)
	}
}
