package mutex_test

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/lock/mutex"
)

// mutexSeq numbers the benchmarks' lock names.
var mutexSeq atomic.Int64

// BenchmarkMutex runs the general-purpose lock beside the raw go-redis
// lock (SET NX PX, then a compare-and-delete script) on the same server in
// the same run; the ratio is what it reports:
//
//	go test -run '^$' -bench Mutex -benchtime 2s ./lock/
//
// Mutex/TryLockUnlock is one acquisition and its release (two round trips,
// as the raw cycle, plus starting and stopping the watchdog); Mutex/Do the
// same through Do; Mutex/Reentry a second TryLock and Unlock of a lock its
// owner holds.
func BenchmarkMutex(b *testing.B) {
	srv := redistest.Start(b)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 64, ContextTimeoutEnabled: true})
	b.Cleanup(func() { rdb.Close() })
	locker := mutex.NewLocker(rdb)
	b.Cleanup(func() { locker.Close() })
	ctx := context.Background()
	ttl := 10 * time.Second
	name := func() string { return "bench-" + strconv.FormatInt(mutexSeq.Add(1), 10) }
	raw := func() error {
		key := "raw:" + name()
		if ok, err := rdb.SetNX(ctx, key, "owner", ttl).Result(); err != nil || !ok {
			return fmt.Errorf("setnx: %v %v", ok, err)
		}
		return rawRelease.Run(ctx, rdb, []string{key}, "owner").Err()
	}
	tryUnlock := func() error {
		m, err := locker.TryLock(ctx, name(), mutex.WithTTL(ttl))
		if err != nil {
			return err
		}
		return m.Unlock(ctx)
	}
	do := func() error {
		return locker.Do(ctx, name(), func(context.Context) error { return nil }, mutex.WithTTL(ttl))
	}
	outer, err := locker.TryLock(mutex.WithOwner(ctx, "bench"), name(), mutex.WithTTL(time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	reentry := func() error {
		m, err := locker.TryLock(outer.Context(), outer.Name(), mutex.WithTTL(ttl))
		if err != nil {
			return err
		}
		return m.Unlock(ctx)
	}
	for _, bc := range []struct {
		name string
		op   func() error
	}{
		{"Raw/LockCycle", raw},
		{"Mutex/TryLockUnlock", tryUnlock},
		{"Mutex/Do", do},
		{"Mutex/Reentry", reentry},
	} {
		b.Run(bc.name+"/seq", func(b *testing.B) {
			for b.Loop() {
				if err := bc.op(); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(bc.name+"/par", func(b *testing.B) {
			b.SetParallelism(4)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := bc.op(); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// rawRelease is the plain compare-and-delete a bare lock would use.
var rawRelease = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

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
