package redislock_test

import (
	"context"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/redislock"
)

// The probe writes its key with a TTL; a Redis at maxmemory refuses it
// with an error Classify calls OOM.
func TestProbeRedis(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	s := redislock.New(rdb, "slotd")
	defer s.Close()
	ctx := context.Background()
	if err := s.Probe(ctx, "r1", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	key := redislock.ProbeKey("slotd", "r1")
	if ttl := rdb.PTTL(ctx, key).Val(); ttl <= 0 || ttl > 5*time.Second {
		t.Errorf("probe key %s TTL %v, want within 5s", key, ttl)
	}
	if err := rdb.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	err := s.Probe(ctx, "r1", 5*time.Second)
	if k := lock.Classify(err); k != lock.KindOOM {
		t.Errorf("probe at maxmemory: %v (kind %q), want oom", err, k)
	}
}

// On Redlock the probe holds while a quorum takes it, and fails with the
// nodes' refusal when it does not.
func TestProbeRedlock(t *testing.T) {
	_, clients := startNodes(t, 3)
	r := newRedlock(t, clients)
	ctx := context.Background()
	if err := clients[0].ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.Probe(ctx, "r1", 5*time.Second); err != nil {
		t.Errorf("probe with 1 of 3 nodes refusing: %v, want nil", err)
	}
	if err := clients[1].ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	err := r.Probe(ctx, "r1", 5*time.Second)
	if k := lock.Classify(err); k != lock.KindOOM {
		t.Errorf("probe with 2 of 3 nodes refusing: %v (kind %q), want oom", err, k)
	}
}
