package zklock_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/internal/zktest"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/redislock"
)

// TestMeasureStoreBurst measures, when SLOTD_MEASURE=1, the slot protocol
// alone (no engine, no tasks): three replicas race to claim N slots due at
// once (lock.ClaimMany) and each winner completes its slot, on Redis (one
// server, no persistence) and on ZooKeeper (three members, forceSync=no),
// on this machine in the same run. It prints how long until every slot was
// done; it asserts that each slot was won once.
//
//	SLOTD_MEASURE=1 go test -count=1 -run TestMeasureStoreBurst -v -timeout 20m ./lock/zklock/
func TestMeasureStoreBurst(t *testing.T) {
	if os.Getenv("SLOTD_MEASURE") == "" {
		t.Skip("set SLOTD_MEASURE=1 to measure")
	}
	p := lock.Policy{Lease: 15 * time.Second, DoneTTL: time.Hour, MaxAttempts: 3}
	for _, n := range []int{100, 10000} {
		t.Run(fmt.Sprintf("redis/%d", n), func(t *testing.T) {
			srv := redistest.Start(t)
			var stores []lock.Store
			for range 3 {
				r := redislock.New(srv.Client(), "slotd")
				t.Cleanup(func() { r.Close() })
				stores = append(stores, r)
			}
			measureStore(t, "redis", stores, n, p)
		})
		t.Run(fmt.Sprintf("zookeeper/%d", n), func(t *testing.T) {
			e := zktest.Start(t, 3)
			var stores []lock.Store
			for range 3 {
				stores = append(stores, dial(t, e, p.Lease, "/slotd"))
			}
			measureStore(t, "zookeeper", stores, n, p)
		})
	}
}

func measureStore(t *testing.T, name string, stores []lock.Store, n int, p lock.Policy) {
	ctx := context.Background()
	now, err := stores[0].Time(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Each round is a fresh set of slots; the first warms up.
	var took time.Duration
	for round := range 2 {
		reqs := make([]lock.ClaimRequest, n)
		for i := range reqs {
			slot := lock.Slot{Task: fmt.Sprintf("t%05d", i), ID: fmt.Sprint(round), Time: now.Add(-time.Second), Deadline: now.Add(time.Hour)}
			reqs[i] = lock.ClaimRequest{Slot: slot, Policy: p}
		}
		var won, failed atomic.Int64
		start := time.Now()
		var wg sync.WaitGroup
		for r, s := range stores {
			wg.Add(1)
			go func() {
				defer wg.Done()
				mine := make([]lock.ClaimRequest, n)
				for i, q := range reqs {
					q.Owner = fmt.Sprint("r", r)
					mine[(i+r*n/len(stores))%n] = q // each replica in its own order
				}
				var done sync.WaitGroup
				sem := make(chan struct{}, 256)
				cctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
				defer cancel()
				lock.ClaimMany(cctx, s, mine, func(i int, reply lock.ClaimReply) {
					if reply.Err != nil {
						failed.Add(1)
						return
					}
					if reply.Result != lock.Won {
						return
					}
					won.Add(1)
					done.Add(1)
					sem <- struct{}{}
					go func() {
						defer func() { <-sem; done.Done() }()
						if err := s.Complete(cctx, mine[i].Slot, lock.Owner{ID: mine[i].Owner, Attempt: reply.Attempt}, p.DoneTTL); err != nil {
							failed.Add(1)
						}
					}()
				})
				done.Wait()
			}()
		}
		wg.Wait()
		took = time.Since(start)
		if won.Load() != int64(n) || failed.Load() != 0 {
			t.Fatalf("round %d: %d slots won, %d calls failed; want %d won, none failed", round, won.Load(), failed.Load(), n)
		}
	}
	t.Logf("MEASURE store %-9s slots=%-5d 3 replicas: every slot claimed and done in %v (%.0f slots/s)",
		name, n, took.Round(time.Millisecond), float64(n)/took.Seconds())
}
