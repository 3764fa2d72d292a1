package redislock_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/redislock"
)

// BenchmarkOps measures each state change of the slot protocol on its own,
// next to the raw go-redis command that does the least a lock needs, on the
// same server in the same run:
//
//	go test -run '^$' -bench Ops -benchtime 1s ./lock/
//
//	claim    Claim of a fresh slot          SET NX PX of a fresh key
//	renew    Renew of a held slot           PEXPIRE
//	complete Complete of a won slot         compare-and-set script (GET, SET PX)
//	release  Release of a won slot          compare-and-delete script
//
// Each runs sequentially (seq: one call at a time, latency) and from 64
// goroutines (par64: slotd's batcher pipelines what they send together).
// raw/pipe16 is the baseline pipelined 16 commands per round trip from 4
// goroutines: 64 callers over the batcher's 4 flights make batches of
// about 16. Ratio = baseline ns/op / slotd ns/op.
func BenchmarkOps(b *testing.B) {
	rdb, r, p := benchEnv(b)
	ctx := context.Background()
	now := time.Now()
	long := p
	long.Lease = time.Hour
	held := benchSlot(now)
	c, err := r.Claim(ctx, held, "r", long)
	if err != nil || c.Result != lock.Won {
		b.Fatalf("claim: %v %v", c.Result, err)
	}
	heldOwner := lock.Owner{ID: "r", Attempt: c.Attempt}
	if err := rdb.Set(ctx, "raw:held", "owner", time.Hour).Err(); err != nil {
		b.Fatal(err)
	}
	owner := lock.Owner{ID: "r", Attempt: 1}

	type op struct {
		name  string
		setup func(b *testing.B, n int) // before the timer, for n operations
		slotd func(i int64) error
		raw   func(pipe redis.Cmdable, i int64) error
	}
	var slots []lock.Slot
	var keys []string
	ops := []op{
		{
			name: "claim",
			setup: func(b *testing.B, n int) {
				slots, keys = freshSlots(now, n), freshKeys(n)
			},
			slotd: func(i int64) error {
				c, err := r.Claim(ctx, slots[i], "r", p)
				if err == nil && c.Result != lock.Won {
					err = fmt.Errorf("claim: %v", c.Result)
				}
				return err
			},
			raw: func(pipe redis.Cmdable, i int64) error {
				return pipe.SetNX(ctx, keys[i], "owner", p.Lease).Err()
			},
		},
		{
			name:  "renew",
			setup: func(*testing.B, int) {},
			slotd: func(int64) error { return r.Renew(ctx, held, heldOwner, long.Lease) },
			raw: func(pipe redis.Cmdable, _ int64) error {
				return pipe.PExpire(ctx, "raw:held", long.Lease).Err()
			},
		},
		{
			name: "complete",
			setup: func(b *testing.B, n int) {
				slots, keys = wonSlots(b, r, now, n, p), setKeys(b, rdb, n, p.Lease)
			},
			slotd: func(i int64) error { return r.Complete(ctx, slots[i], owner, p.DoneTTL) },
			raw: func(pipe redis.Cmdable, i int64) error {
				return rawComplete.Run(ctx, pipe, []string{keys[i]}, "owner", "done", p.DoneTTL.Milliseconds()).Err()
			},
		},
		{
			name: "release",
			setup: func(b *testing.B, n int) {
				slots, keys = wonSlots(b, r, now, n, p), setKeys(b, rdb, n, p.Lease)
			},
			slotd: func(i int64) error { return r.Release(ctx, slots[i], owner) },
			raw: func(pipe redis.Cmdable, i int64) error {
				return rawRelease.Run(ctx, pipe, []string{keys[i]}, "owner").Err()
			},
		},
	}
	for _, o := range ops {
		var next atomic.Int64
		run := func(name string, par int, f func(i int64) error) {
			b.Run(o.name+"/"+name, func(b *testing.B) {
				o.setup(b, b.N)
				next.Store(0)
				b.ResetTimer()
				if par == 0 {
					for i := range b.N {
						if err := f(int64(i)); err != nil {
							b.Fatal(err)
						}
					}
					return
				}
				b.SetParallelism(max(1, par/runtime.GOMAXPROCS(0)))
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if err := f(next.Add(1) - 1); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
		run("slotd/seq", 0, o.slotd)
		run("raw/seq", 0, func(i int64) error { return o.raw(rdb, i) })
		run("slotd/par64", 64, o.slotd)
		run("raw/par64", 64, func(i int64) error { return o.raw(rdb, i) })
		b.Run(o.name+"/raw/pipe16", func(b *testing.B) {
			o.setup(b, b.N)
			next.Store(0)
			b.ResetTimer()
			b.SetParallelism(max(1, 4/runtime.GOMAXPROCS(0)))
			b.RunParallel(func(pb *testing.PB) {
				for {
					pipe := rdb.Pipeline()
					n := 0
					for ; n < 16 && pb.Next(); n++ {
						_ = o.raw(pipe, next.Add(1)-1)
					}
					if n == 0 {
						return
					}
					if _, err := pipe.Exec(ctx); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// rawComplete is the baseline's complete: compare, then overwrite with a TTL.
var rawComplete = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) end return 0`)

func freshSlots(now time.Time, n int) []lock.Slot {
	out := make([]lock.Slot, n)
	for i := range out {
		out[i] = benchSlot(now)
	}
	return out
}

func freshKeys(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "raw:" + strconv.FormatInt(benchSeq.Add(1), 10)
	}
	return out
}

// wonSlots claims n fresh slots (attempt 1, owner "r"), 64 at a time.
func wonSlots(b *testing.B, r *redislock.Store, now time.Time, n int, p lock.Policy) []lock.Slot {
	slots := freshSlots(now, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
				c, err := r.Claim(context.Background(), slots[i], "r", p)
				if err != nil || c.Result != lock.Won || c.Attempt != 1 {
					b.Errorf("setup claim: %v %v", c.Result, err)
					return
				}
			}
		})
	}
	wg.Wait()
	return slots
}

// setKeys sets n fresh keys to "owner", pipelined.
func setKeys(b *testing.B, rdb *redis.Client, n int, ttl time.Duration) []string {
	keys := freshKeys(n)
	for start := 0; start < n; start += 256 {
		pipe := rdb.Pipeline()
		for _, k := range keys[start:min(start+256, n)] {
			pipe.Set(context.Background(), k, "owner", ttl)
		}
		if _, err := pipe.Exec(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	return keys
}
