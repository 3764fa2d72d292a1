package zklock_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/zktest"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/zklock"
)

// TestMeasureZooKeeperCPUFloor measures, when SLOTD_MEASURE=1, what a
// burst costs a three-member ensemble at the fewest requests the slot
// protocol needs, as the engine sends them: for each of N slots one
// replica (the preferred claimant, watching through its claims) claims
// the fresh slot (a create and a multi-op) and completes it (a multi-op,
// then arms its slot node's watch), while two peers watch the slot (an
// exists watch, again after the claim, and a read of the slot node at
// the completion) and settle on the completion notice. It prints the
// members' CPU-seconds per slot and per request, the ensemble's own raw
// create on the same members for comparison (a create per slot, its CPU
// per request), and what they imply for a burst on this machine: how many
// slots a second its cores could serve at the floor, ensemble alone.
//
//	SLOTD_MEASURE=1 go test -count=1 -run TestMeasureZooKeeperCPUFloor -v ./lock/zklock/
func TestMeasureZooKeeperCPUFloor(t *testing.T) {
	if os.Getenv("SLOTD_MEASURE") == "" {
		t.Skip("set SLOTD_MEASURE=1 to measure")
	}
	const n = 10000
	e := zktest.Start(t, 3)
	p := lock.Policy{Lease: 15 * time.Second, DoneTTL: time.Hour, MaxAttempts: 3}
	var stores []*zklock.Store
	for range 3 {
		stores = append(stores, dial(t, e, p.Lease, "/slotd"))
	}
	ctx := context.Background()
	now, err := stores[0].Time(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for round := range 2 { // the first warms the members' JIT up
		slots := make([]lock.Slot, n)
		for i := range slots {
			slots[i] = lock.Slot{Task: fmt.Sprintf("t%05d", i), ID: fmt.Sprint("floor", round), Time: now.Add(-time.Second), Deadline: now.Add(time.Hour)}
		}
		cpu0, pk0 := membersCPU(t, e), packets(t, e)
		start := time.Now()
		var settled atomic.Int64
		var watches []*lock.Watch
		for _, peer := range stores[1:] {
			for _, slot := range slots {
				w := peer.Watch(slot)
				var once sync.Once
				w.OnChange(func(c lock.Change) {
					if c == lock.Completed {
						once.Do(func() { settled.Add(1) })
					}
				})
				watches = append(watches, w)
			}
		}
		claimant := stores[0]
		reqs := make([]lock.ClaimRequest, n)
		for i, slot := range slots {
			watches = append(watches, claimant.WatchClaims(slot))
			reqs[i] = lock.ClaimRequest{Slot: slot, Owner: "a", Policy: p}
		}
		var failed atomic.Int64
		var firstErr atomic.Value
		fail := func(what string) {
			failed.Add(1)
			firstErr.CompareAndSwap(nil, what)
		}
		var done sync.WaitGroup
		sem := make(chan struct{}, zklock.ClaimsInFlight)
		claimant.ClaimMany(ctx, reqs, func(i int, r lock.ClaimReply) {
			if r.Err != nil || r.Result != lock.Won {
				fail(fmt.Sprintf("claim of %s: %+v, %v", reqs[i].Slot, r.Claim, r.Err))
				return
			}
			done.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; done.Done() }()
				if err := claimant.Complete(ctx, reqs[i].Slot, lock.Owner{ID: "a", Attempt: r.Attempt}, p.DoneTTL); err != nil {
					fail(err.Error())
				}
			}()
		})
		done.Wait()
		if failed.Load() != 0 {
			t.Fatalf("%d claims or completions failed, the first: %v", failed.Load(), firstErr.Load())
		}
		// A peer whose watch was armed only after the completion hears
		// nothing (the engine's deferring run then claims and finds the
		// slot done): wait until the notices stop coming.
		took := time.Since(start)
		for last := int64(-1); settled.Load() != last && settled.Load() < 2*n; {
			last = settled.Load()
			time.Sleep(time.Second)
			took = time.Since(start)
		}
		cpu, pk := membersCPU(t, e)-cpu0, packets(t, e)-pk0
		for _, w := range watches {
			w.Stop()
		}
		if round == 0 {
			continue
		}
		t.Logf("MEASURE zookeeper floor slots=%d: claimed and done in %v, %d of %d peers' watches told the completion; members' CPU %.2f s: %.0f µs per slot, %.1f requests per slot, %.0f µs per request",
			n, took.Round(time.Millisecond), settled.Load(), 2*n, cpu, cpu/n*1e6, float64(pk)/n, cpu/float64(pk)*1e6)
		t.Logf("MEASURE zookeeper floor: on 2 cores the members alone serve at most %.0f slots/s; 10,000 slots take at least %.1f s of both cores",
			2/(cpu/n), cpu/n*10000/2)
	}
	cpu0, pk0 := membersCPU(t, e), packets(t, e)
	raw := rawCreates(t, e, n, zklock.ClaimsInFlight)
	cpu, pk := membersCPU(t, e)-cpu0, packets(t, e)-pk0
	t.Logf("MEASURE zookeeper raw create slots=%d: %.0f creates answered/s; members' CPU %.2f s: %.0f µs per request (%d requests)",
		n, raw, cpu, cpu/float64(pk)*1e6, pk)
}

// membersCPU is the CPU-seconds the ensemble's member processes have used.
func membersCPU(t *testing.T, e *zktest.Ensemble) float64 {
	t.Helper()
	var sum float64
	for _, m := range e.Members {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", m.PID()))
		if err != nil {
			t.Fatal(err)
		}
		// After the command name in parentheses: utime is field 14,
		// stime 15, in clock ticks (USER_HZ, 100).
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		ut, _ := strconv.ParseFloat(f[11], 64)
		st, _ := strconv.ParseFloat(f[12], 64)
		sum += (ut + st) / 100
	}
	return sum
}

// packets is the requests the ensemble's members have received (mntr's
// zk_packets_received, summed).
func packets(t *testing.T, e *zktest.Ensemble) int64 {
	t.Helper()
	var sum int64
	for _, m := range e.Members {
		for line := range strings.SplitSeq(m.Command("mntr"), "\n") {
			if v, ok := strings.CutPrefix(line, "zk_packets_received"); ok {
				n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				if err != nil {
					t.Fatalf("mntr: %q", line)
				}
				sum += n
			}
		}
	}
	return sum
}
