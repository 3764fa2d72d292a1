package lock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/integration/redistest"
	"github.com/slotd/slotd/lock"
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
		r    *lock.Redis
	}{
		{"NoWait", lock.NewRedis(rdb, "slotd")},
		{"Ack1", lock.NewRedis(rdb, "slotd", lock.WithMinReplicasAck(1, time.Second))},
	} {
		cycle := func() error {
			slot := benchSlot(now)
			c, err := bc.r.Claim(ctx, slot, "r", p)
			if err != nil || c.Result != lock.Won {
				return fmt.Errorf("claim: %v %v", c.Result, err)
			}
			return bc.r.Complete(ctx, slot, lock.Owner{Replica: "r", Attempt: c.Attempt}, p.DoneTTL)
		}
		b.Run(bc.name+"/seq", func(b *testing.B) {
			for b.Loop() {
				if err := cycle(); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(bc.name+"/par", func(b *testing.B) {
			b.SetParallelism(4)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := cycle(); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
