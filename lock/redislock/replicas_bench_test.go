package redislock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/redislock"
)

// BenchmarkReplicasAck prices min_replicas_ack: the success cycle (claim +
// complete) on a master with one replica, without WAIT (the baseline) and
// with WithMinReplicasAck(1), in the same run:
//
//	go test -run '^$' -bench ReplicasAck -benchtime 2s ./lock/
func BenchmarkReplicasAck(b *testing.B) {
	srv := redistest.Start(b)
	redistest.StartReplica(b, srv)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 64, ContextTimeoutEnabled: true})
	b.Cleanup(func() { rdb.Close() })
	p := lock.Policy{Lease: 10 * time.Second, DoneTTL: time.Minute, MaxAttempts: 3}
	ctx := context.Background()
	now := time.Now()
	for _, bc := range []struct {
		name string
		r    *redislock.Store
	}{
		{"NoWait", redislock.New(rdb, "slotd")},
		{"Ack1", redislock.New(rdb, "slotd", redislock.WithMinReplicasAck(1, time.Second))},
	} {
		seqPar(b, bc.name, claimComplete(ctx, bc.r, p, now))
	}
}
