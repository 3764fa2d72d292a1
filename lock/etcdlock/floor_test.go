package etcdlock_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/slotd/slotd/internal/etcdtest"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/etcdlock"
	"github.com/slotd/slotd/scheduler/history"
)

// TestMeasureEtcdCPUFloor measures, when SLOTD_MEASURE=1, what a burst
// costs a three-member etcd cluster at the fewest requests the slot
// protocol needs, as the engine sends them: one replica (the preferred
// claimant) claims N fresh slots with ClaimMany (a hundred first claims per
// transaction) and completes each as its claim comes back (completions
// batched as the Store batches them), then appends its history entry,
// while two peers watch every slot (the Store's one prefix watch) and
// settle on the completion notice. It prints the members' CPU-seconds per
// slot and the gRPC calls per slot, and then, on the same members, the
// cluster's own raw conditional create: three clients racing to
// put-if-absent (a transaction comparing the key's create revision with 0)
// every key of a fresh burst, rawInFlight each in flight (as
// BenchmarkBurst's baseline), its creates answered per second and CPU per
// create; and what the floor implies for a burst on this machine.
//
//	SLOTD_MEASURE=1 go test -count=1 -run TestMeasureEtcdCPUFloor -v ./lock/etcdlock/
func TestMeasureEtcdCPUFloor(t *testing.T) {
	if os.Getenv("SLOTD_MEASURE") == "" {
		t.Skip("set SLOTD_MEASURE=1 to measure")
	}
	const n = 10000
	const rawInFlight = 128
	c := etcdtest.Start(t, 3)
	p := lock.Policy{Lease: 15 * time.Second, DoneTTL: time.Hour, MaxAttempts: 3}
	var stores []*etcdlock.Store
	for range 3 {
		stores = append(stores, newStore(t, c.Endpoints()))
	}
	hist := etcdlock.NewHistory(stores[0], "slotd", 24*time.Hour)
	ctx := context.Background()
	now, err := stores[0].Time(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for round := range 2 { // the first grows the members' heaps and the clients' connections
		slots := make([]lock.Slot, n)
		for i := range slots {
			slots[i] = lock.Slot{Task: fmt.Sprintf("t%05d", i), ID: fmt.Sprint("floor", round), Time: now.Add(-time.Second), Deadline: now.Add(time.Hour)}
		}
		cpu0, calls0 := etcdCPU(t, c), etcdCalls(t, c)
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
			reqs[i] = lock.ClaimRequest{Slot: slot, Owner: "a", Policy: p}
		}
		var failed atomic.Int64
		var firstErr atomic.Value
		fail := func(what string) {
			failed.Add(1)
			firstErr.CompareAndSwap(nil, what)
		}
		var done sync.WaitGroup
		var claimed time.Duration
		claimant.ClaimMany(ctx, reqs, func(i int, r lock.ClaimReply) {
			if r.Err != nil || r.Result != lock.Won {
				fail(fmt.Sprintf("claim of %s: %+v, %v", reqs[i].Slot, r.Claim, r.Err))
				return
			}
			claimed = time.Since(start)
			done.Add(1)
			go func() {
				defer done.Done()
				if err := claimant.Complete(ctx, reqs[i].Slot, lock.Owner{ID: "a", Attempt: r.Attempt}, p.DoneTTL); err != nil {
					fail(err.Error())
					return
				}
				e := history.Entry{Slot: reqs[i].Slot.ID, SlotTime: reqs[i].Slot.Time, Attempt: r.Attempt, Replica: "a", Outcome: "success", Started: start, Duration: time.Since(start)}
				if err := hist.Append(ctx, reqs[i].Slot.Task, e); err != nil {
					fail(err.Error())
				}
			}()
		})
		done.Wait()
		if failed.Load() != 0 {
			t.Fatalf("%d claims, completions or appends failed, the first: %v", failed.Load(), firstErr.Load())
		}
		took := time.Since(start)
		for last := int64(-1); settled.Load() != last && settled.Load() < 2*n; { // the peers' notices still coming
			last = settled.Load()
			time.Sleep(time.Second)
		}
		cpu, calls := etcdCPU(t, c)-cpu0, etcdCalls(t, c)
		for _, w := range watches {
			w.Stop()
		}
		if settled.Load() != 2*n {
			t.Errorf("%d of %d peers' watches told the completion", settled.Load(), 2*n)
		}
		if round == 0 {
			continue
		}
		t.Logf("MEASURE etcd floor slots=%d: all claimed in %v (%.0f claims/s), claimed, done and recorded in %v; members' CPU %.2f s: %.0f µs per slot; gRPC calls per slot %s",
			n, claimed.Round(time.Millisecond), n/claimed.Seconds(), took.Round(time.Millisecond), cpu, cpu/n*1e6, perSlot(calls0, calls, n))
		t.Logf("MEASURE etcd floor: on 2 cores the members alone serve at most %.0f slots/s; 10,000 slots take at least %.1f s of both cores, and %.1f cores to be served within 3 s",
			2/(cpu/n), cpu/n*10000/2, cpu/n*10000/3)
	}
	clis := make([]*clientv3.Client, 3)
	for i := range clis {
		clis[i] = client(t, c.Endpoints())
	}
	cpu0 := etcdCPU(t, c)
	rate, answers := rawPutIfAbsent(t, clis, n, rawInFlight)
	cpu := etcdCPU(t, c) - cpu0
	t.Logf("MEASURE etcd raw put-if-absent keys=%d: 3 clients racing, %d in flight each: %.0f creates answered/s; members' CPU %.2f s: %.0f µs per create",
		n, rawInFlight, rate, cpu, cpu/float64(answers)*1e6)
}

// rawPutIfAbsent has each client race to create every one of n fresh keys
// with a put-if-absent transaction, inFlight at once per client, and
// returns the transactions answered per second and their number; it fails
// t unless each key was created once.
func rawPutIfAbsent(t *testing.T, clis []*clientv3.Client, n, inFlight int) (float64, int) {
	prefix := fmt.Sprintf("raw-%d-", time.Now().UnixNano())
	var created, answers atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for _, cli := range clis {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem := make(chan struct{}, inFlight)
			var inner sync.WaitGroup
			for i := range n {
				sem <- struct{}{}
				inner.Add(1)
				go func() {
					defer func() { <-sem; inner.Done() }()
					key := prefix + strconv.Itoa(i)
					resp, err := cli.Txn(context.Background()).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
						Then(clientv3.OpPut(key, "r")).Commit()
					if err != nil {
						t.Error(err)
						return
					}
					answers.Add(1)
					if resp.Succeeded {
						created.Add(1)
					}
				}()
			}
			inner.Wait()
		}()
	}
	wg.Wait()
	took := time.Since(start)
	if created.Load() != int64(n) {
		t.Fatalf("raw: %d keys created, want %d", created.Load(), n)
	}
	return float64(answers.Load()) / took.Seconds(), int(answers.Load())
}

// etcdCPU is the CPU-seconds the cluster's member processes have used.
func etcdCPU(t *testing.T, c *etcdtest.Cluster) float64 {
	t.Helper()
	var sum float64
	for _, m := range c.Members {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", m.PID()))
		if err != nil {
			t.Fatal(err)
		}
		// After the command name in parentheses: utime is field 14, stime
		// 15, in clock ticks (USER_HZ, 100).
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		ut, _ := strconv.ParseFloat(f[11], 64)
		st, _ := strconv.ParseFloat(f[12], 64)
		sum += (ut + st) / 100
	}
	return sum
}

// etcdCalls is the gRPC calls the members have started, by method, summed
// over the members (grpc_server_started_total).
func etcdCalls(t *testing.T, c *etcdtest.Cluster) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, m := range c.Members {
		resp, err := http.Get(m.ClientURL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			rest, ok := strings.CutPrefix(sc.Text(), `grpc_server_started_total{grpc_method="`)
			if !ok {
				continue
			}
			method, _, _ := strings.Cut(rest, `"`)
			f := strings.Fields(rest)
			if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
				out[method] += v
			}
		}
		resp.Body.Close()
	}
	return out
}

// perSlot is the calls made between two etcdCalls, per slot, by method.
func perSlot(before, after map[string]float64, n int) string {
	var b strings.Builder
	var total float64
	for m, v := range after {
		if d := v - before[m]; d > 0 {
			fmt.Fprintf(&b, "%s %.3f, ", m, d/float64(n))
			total += d
		}
	}
	return fmt.Sprintf("%.3f (%s)", total/float64(n), strings.TrimSuffix(b.String(), ", "))
}
