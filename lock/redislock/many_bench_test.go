package redislock_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/redislock"
)

// BenchmarkClaimMany is issue #5's comparison: 3 replicas, each with its
// own client and store, claim the same fresh slots at once with ClaimMany
// (one wins each slot, the others read it held), next to 3 clients sending
// SET NX PX of as many fresh keys, pipelined 256 per round trip, on the
// same server in the same run. One op is one slot (3 claims):
//
//	go test -run '^$' -bench ClaimMany -benchtime 30000x ./lock/
//
// Ratio = raw ns/op / slotd ns/op. server-us/claim is the server's own time
// (INFO commandstats: EVALSHA for slotd, SET for raw) per claim.
func BenchmarkClaimMany(b *testing.B) {
	const replicas, pipe = 3, 256
	rdb, _, p := benchEnv(b)
	ctx := context.Background()
	addr := rdb.Options().Addr
	clients := make([]*redis.Client, replicas)
	stores := make([]*redislock.Store, replicas)
	for i := range clients {
		clients[i] = redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		stores[i] = redislock.New(clients[i], "slotd")
		b.Cleanup(func() { stores[i].Close(); clients[i].Close() })
	}
	// parallel runs f(0..replicas-1) at once and waits for them.
	parallel := func(f func(i int)) {
		var wg sync.WaitGroup
		for i := range replicas {
			wg.Go(func() { f(i) })
		}
		wg.Wait()
	}
	b.Run("slotd", func(b *testing.B) {
		slots := freshSlots(time.Now(), b.N)
		reqs := make([][]lock.ClaimRequest, replicas)
		for i := range reqs {
			reqs[i] = make([]lock.ClaimRequest, len(slots))
			for j, s := range slots {
				reqs[i][j] = lock.ClaimRequest{Slot: s, Owner: "r" + string(rune('0'+i)), Policy: p}
			}
		}
		won := make([]int, replicas)
		before := serverUsec(b, rdb, "evalsha")
		b.ResetTimer()
		parallel(func(i int) {
			lock.ClaimMany(ctx, stores[i], reqs[i], func(_ int, rep lock.ClaimReply) {
				switch {
				case rep.Err != nil:
					b.Error(rep.Err)
				case rep.Result == lock.Won:
					won[i]++
				}
			})
		})
		b.StopTimer()
		b.ReportMetric((serverUsec(b, rdb, "evalsha")-before)/float64(replicas*b.N), "server-us/claim")
		if total := won[0] + won[1] + won[2]; total != b.N {
			b.Fatalf("%d slots won by %v, want each once", b.N, won)
		}
	})
	b.Run("raw/pipe256", func(b *testing.B) {
		keys := freshKeys(b.N)
		before := serverUsec(b, rdb, "set")
		b.ResetTimer()
		parallel(func(i int) {
			for start := 0; start < len(keys); start += pipe {
				pl := clients[i].Pipeline()
				for _, k := range keys[start:min(start+pipe, len(keys))] {
					pl.SetNX(ctx, k, "owner", p.Lease)
				}
				if _, err := pl.Exec(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.StopTimer()
		b.ReportMetric((serverUsec(b, rdb, "set")-before)/float64(replicas*b.N), "server-us/claim")
	})
}

// serverUsec is the server's total time in command name so far, in µs.
func serverUsec(b *testing.B, rdb *redis.Client, name string) float64 {
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+name+":"); ok {
			for _, f := range strings.Split(rest, ",") {
				if v, ok := strings.CutPrefix(f, "usec="); ok {
					n, err := strconv.ParseFloat(v, 64)
					if err != nil {
						b.Fatal(err)
					}
					return n
				}
			}
		}
	}
	return 0 // not called yet
}
