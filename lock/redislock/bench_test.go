package redislock_test

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/redislock"
)

// The benchmarks run the slot protocol on a real redis-server next to the
// raw go-redis baseline on the same server in the same run, so that the
// ratio, not the absolute figure, is what they report:
//
//	go test -run '^$' -bench . -benchtime 2s ./lock/
//
// Raw/LockCycle is the classic lock: SET NX PX, then a compare-and-delete
// script. Slot/ClaimComplete is slotd's success path; Slot/ClaimRelease its
// failure path. Each runs sequentially (one round trip at a time: latency)
// and in parallel (GOMAXPROCS×4 goroutines on the pool: throughput).

var benchSeq atomic.Int64

var rawRelease = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

func benchEnv(b *testing.B) (*redis.Client, *redislock.Store, lock.Policy) {
	srv := redistest.Start(b)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 64})
	b.Cleanup(func() { rdb.Close() })
	return rdb, redislock.New(rdb, "slotd"), lock.Policy{Lease: 10 * time.Second, DoneTTL: time.Minute, MaxAttempts: 3}
}

func benchSlot(now time.Time) lock.Slot {
	n := benchSeq.Add(1)
	return lock.Slot{Task: "bench", ID: strconv.FormatInt(n, 10), Time: now.Add(-time.Second), Deadline: now.Add(time.Hour)}
}

func BenchmarkLock(b *testing.B) {
	rdb, r, p := benchEnv(b)
	ctx := context.Background()
	now := time.Now()
	raw := func() error {
		key := "raw:" + strconv.FormatInt(benchSeq.Add(1), 10)
		if ok, err := rdb.SetNX(ctx, key, "owner", p.Lease).Result(); err != nil || !ok {
			return fmt.Errorf("setnx: %v %v", ok, err)
		}
		return rawRelease.Run(ctx, rdb, []string{key}, "owner").Err()
	}
	claimRelease := func() error {
		slot := benchSlot(now)
		c, err := r.Claim(ctx, slot, "r", p)
		if err != nil || c.Result != lock.Won {
			return fmt.Errorf("claim: %v %v", c.Result, err)
		}
		return r.Release(ctx, slot, lock.Owner{ID: "r", Attempt: c.Attempt})
	}
	held := benchSlot(now)
	long := p
	long.Lease = time.Hour // outlives the benchmarks before it
	c, err := r.Claim(ctx, held, "r", long)
	if err != nil {
		b.Fatal(err)
	}
	owner := lock.Owner{ID: "r", Attempt: c.Attempt}
	renew := func() error { return r.Renew(ctx, held, owner, p.Lease) }
	rawRenew := func() error { return rdb.PExpire(ctx, "slotd:{bench:"+held.ID+"}", p.Lease).Err() }

	for _, bc := range []struct {
		name string
		op   func() error
	}{
		{"Raw/LockCycle", raw},
		{"Slot/ClaimComplete", claimComplete(ctx, r, p, now)},
		{"Slot/ClaimRelease", claimRelease},
		{"Raw/PExpire", rawRenew},
		{"Slot/Renew", renew},
	} {
		seqPar(b, bc.name, bc.op)
	}
}

// seqPar runs op as the sub-benchmarks name/seq (one at a time: latency)
// and name/par (GOMAXPROCS×4 goroutines: throughput).
func seqPar(b *testing.B, name string, op func() error) {
	b.Run(name+"/seq", func(b *testing.B) {
		for b.Loop() {
			if err := op(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run(name+"/par", func(b *testing.B) {
		b.SetParallelism(4)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := op(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// claimComplete is the success cycle on s: a claim of a fresh slot, then
// its complete.
func claimComplete(ctx context.Context, s lock.Store, p lock.Policy, now time.Time) func() error {
	return func() error {
		slot := benchSlot(now)
		c, err := s.Claim(ctx, slot, "r", p)
		if err != nil || c.Result != lock.Won {
			return fmt.Errorf("claim: %v %v", c.Result, err)
		}
		return s.Complete(ctx, slot, lock.Owner{ID: "r", Attempt: c.Attempt}, p.DoneTTL)
	}
}
