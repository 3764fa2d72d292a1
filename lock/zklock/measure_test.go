package zklock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/internal/zktest"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/redislock"
	"github.com/slotd/slotd/lock/zklock"
)

// TestMeasureStoreBurst measures, when SLOTD_MEASURE=1, the slot protocol
// alone (no engine, no tasks): three replicas race to claim N slots due at
// once (lock.ClaimMany) and each winner completes its slot, on Redis (one
// server, no persistence) and on ZooKeeper (three members, forceSync=no),
// on this machine in the same run. It prints how long until every slot was
// done and the claims answered per second; it asserts that each slot was
// won once. On ZooKeeper it then measures the ensemble's own raw
// conditional create on the same members: three sessions each create
// every node of a fresh burst (one persistent node per slot, the loser
// answered "node exists"), with as many creates in flight per session as
// ClaimMany has claims (zklock.ClaimsInFlight), and prints the creates
// answered per second and the ratio.
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
			claims := measureStore(t, "zookeeper", stores, n, p)
			raw := rawCreates(t, e, n, zklock.ClaimsInFlight)
			t.Logf("MEASURE raw zookeeper create slots=%-5d 3 sessions, %d in flight each: %.0f creates answered/s; claims/s ÷ raw = %.2f",
				n, zklock.ClaimsInFlight, raw, claims/raw)
		})
	}
}

// measureStore returns the claims answered per second in the last round.
func measureStore(t *testing.T, name string, stores []lock.Store, n int, p lock.Policy) float64 {
	ctx := context.Background()
	now, err := stores[0].Time(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Each round is a fresh set of slots; the first warms up.
	var took time.Duration
	var answered atomic.Int64
	for round := range 2 {
		answered.Store(0)
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
					answered.Add(1)
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
	claims := float64(answered.Load()) / took.Seconds()
	t.Logf("MEASURE store %-9s slots=%-5d 3 replicas: every slot claimed and done in %v (%.0f slots/s, %.0f claims answered/s)",
		name, n, took.Round(time.Millisecond), float64(n)/took.Seconds(), claims)
	return claims
}

// rawCreates has three sessions on e race to create each of n nodes, each
// with inFlight creates in flight, and returns the creates answered per
// second; it fails t unless each node was created once.
func rawCreates(t *testing.T, e *zktest.Ensemble, n, inFlight int) float64 {
	var conns []*zk.Conn
	for range 3 {
		c, _, err := zk.Connect(e.Servers(), 10*time.Second, zk.WithLogInfo(false))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		conns = append(conns, c)
	}
	root := fmt.Sprintf("/raw-%d", time.Now().UnixNano())
	if _, err := conns[0].Create(root, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	var created, answered atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for r, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem := make(chan struct{}, inFlight)
			var inner sync.WaitGroup
			for i := range n {
				k := (i + r*n/len(conns)) % n // each session in its own order, as the replicas claim
				sem <- struct{}{}
				inner.Add(1)
				go func() {
					defer func() { <-sem; inner.Done() }()
					_, err := c.Create(fmt.Sprintf("%s/t%05d", root, k), []byte("r"), 0, zk.WorldACL(zk.PermAll))
					switch {
					case err == nil:
						created.Add(1)
					case !errors.Is(err, zk.ErrNodeExists):
						t.Error(err)
						return
					}
					answered.Add(1)
				}()
			}
			inner.Wait()
		}()
	}
	wg.Wait()
	took := time.Since(start)
	if created.Load() != int64(n) {
		t.Fatalf("raw: %d nodes created, want %d", created.Load(), n)
	}
	return float64(answered.Load()) / took.Seconds()
}
