package etcdlock_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/etcdtest"
	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/etcdlock"
	"github.com/slotd/slotd/lock/redislock"
)

// BenchmarkBurst is a burst of n slots all due at once, raced for by three
// replicas (a store each, on a client each) as the engine races: each
// replica claims every slot (lock.ClaimMany), and each winner completes
// its slot. It reports the burst's makespan (ns/op: from the first claim
// sent to the last slot completed), the claims answered per second, and
// the 50th and 99th percentile of the time until a slot's winner knew it
// had won — on a 3-member etcd cluster and, beside it on the same machine,
// on one redis-server. The figures depend on the machine and its load:
//
//	go test -run '^$' -bench Burst -benchtime 3x ./lock/etcdlock/
func BenchmarkBurst(b *testing.B) {
	for _, n := range []int{100, 10000} {
		b.Run(fmt.Sprintf("etcd/%d", n), func(b *testing.B) {
			c := etcdtest.Start(b, 3)
			var stores []lock.Store
			for range 3 {
				cli := client(b, c.Endpoints())
				s := etcdlock.New(cli, "slotd")
				b.Cleanup(func() { s.Close() })
				stores = append(stores, s)
			}
			burst(b, stores, n)
		})
		b.Run(fmt.Sprintf("redis/%d", n), func(b *testing.B) {
			srv := redistest.Start(b)
			var stores []lock.Store
			for range 3 {
				r := redislock.New(srv.Client(), "slotd")
				b.Cleanup(func() { r.Close() })
				stores = append(stores, r)
			}
			burst(b, stores, n)
		})
	}
}

func burst(b *testing.B, stores []lock.Store, n int) {
	ctx := context.Background()
	p := lock.Policy{Lease: 15 * time.Second, DoneTTL: time.Hour, MaxAttempts: 3}
	for _, s := range stores { // each store's clock takes its first sample
		if _, err := s.Time(ctx); err != nil {
			b.Fatal(err)
		}
	}
	var won []time.Duration
	var claims int
	var spent time.Duration
	b.ResetTimer()
	for it := range b.N {
		now := time.Now()
		slots := make([]lock.Slot, n)
		for i := range slots {
			slots[i] = lock.Slot{Task: fmt.Sprintf("burst-%d-%d-%d", now.UnixNano(), it, i), ID: "1",
				Time: now.Add(-time.Second), Deadline: now.Add(time.Hour)}
		}
		var mu sync.Mutex
		var wg sync.WaitGroup
		start := time.Now()
		for r, s := range stores {
			wg.Add(1)
			go func() {
				defer wg.Done()
				reqs := make([]lock.ClaimRequest, n)
				for i := range reqs {
					reqs[i] = lock.ClaimRequest{Slot: slots[i], Owner: fmt.Sprintf("r%d", r), Policy: p}
				}
				// each winner completes its slot as soon as it knows, on a
				// goroutine of its own, as the engine runs an attempt
				var cw sync.WaitGroup
				lock.ClaimMany(ctx, s, reqs, func(i int, rep lock.ClaimReply) {
					if rep.Err != nil {
						b.Error(rep.Err)
						return
					}
					mu.Lock()
					claims++
					if rep.Result == lock.Won {
						won = append(won, time.Since(start))
					}
					mu.Unlock()
					if rep.Result != lock.Won {
						return
					}
					cw.Add(1)
					go func() {
						defer cw.Done()
						if err := s.Complete(ctx, slots[i], lock.Owner{ID: fmt.Sprintf("r%d", r), Attempt: 1}, p.DoneTTL); err != nil {
							b.Error(err)
						}
					}()
				})
				cw.Wait()
			}()
		}
		wg.Wait()
		spent += time.Since(start)
	}
	b.StopTimer()
	if len(won) != n*b.N {
		b.Fatalf("%d slots won, want %d", len(won), n*b.N)
	}
	slices.Sort(won)
	b.ReportMetric(float64(claims)/spent.Seconds(), "claims/s")
	b.ReportMetric(float64(won[len(won)/2].Microseconds())/1000, "p50-won-ms")
	b.ReportMetric(float64(won[len(won)*99/100].Microseconds())/1000, "p99-won-ms")
}
