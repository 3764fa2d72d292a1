package lock

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/integration/redistest"
)

// gate is a go-redis hook that counts pipelines and commands, and holds the
// first `hold` pipelines until it is opened, so a test can fill the batcher's
// flights and watch what queues behind them.
type gate struct {
	hold      int64
	entered   chan struct{}
	open      chan struct{}
	pipelines atomic.Int64
	commands  atomic.Int64
	armed     atomic.Bool // counts and holds nothing until armed
}

func newGate(hold int) *gate {
	return &gate{hold: int64(hold), entered: make(chan struct{}, hold), open: make(chan struct{})}
}

func (g *gate) DialHook(next redis.DialHook) redis.DialHook { return next }
func (g *gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}
func (g *gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		// A new connection's handshake (CLIENT SETINFO) is a pipeline too.
		if !g.armed.Load() || cmds[0].Name() == "client" {
			return next(ctx, cmds)
		}
		if n := g.pipelines.Add(1); n <= g.hold {
			g.entered <- struct{}{}
			select { // never hold forever: a stuck test fails, it does not hang
			case <-g.open:
			case <-time.After(30 * time.Second):
			}
		}
		g.commands.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

var _ redis.Hook = (*gate)(nil)

func gatedStore(t *testing.T, g *gate) (*Redis, *redis.Client) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 16, ContextTimeoutEnabled: true})
	rdb.AddHook(g)
	t.Cleanup(func() { rdb.Close() })
	r := NewRedis(rdb, "slotd")
	t.Cleanup(func() { r.Close() })
	// Warm the script cache so counts see no NOSCRIPT resend.
	p := Policy{Lease: time.Minute, DoneTTL: time.Hour, MaxAttempts: 3}
	now := time.Now()
	warm := Slot{Task: "warm", ID: "0", Time: now.Add(-time.Second), Deadline: now.Add(time.Hour)}
	ctx := context.Background()
	c, err := r.Claim(ctx, warm, "w", p)
	if err != nil {
		t.Fatal(err)
	}
	o := Owner{Replica: "w", Attempt: c.Attempt}
	if err := r.Renew(ctx, warm, o, p.Lease); err != nil {
		t.Fatal(err)
	}
	if err := r.Release(ctx, warm, o); err != nil {
		t.Fatal(err)
	}
	g.armed.Store(true)
	return r, rdb
}

func queued(r *Redis) int {
	r.batch.mu.Lock()
	defer r.batch.mu.Unlock()
	return len(r.batch.queue)
}

// awaitQueue waits until n calls are queued behind the held flights.
func awaitQueue(t *testing.T, r *Redis, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); queued(r) < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d calls queued, want %d", queued(r), n)
		}
	}
}

// awaitEntered waits until one more pipeline is held by the gate.
func awaitEntered(t *testing.T, g *gate) {
	t.Helper()
	select {
	case <-g.entered:
	case <-time.After(30 * time.Second):
		t.Fatalf("%d pipelines entered the gate, want more", g.pipelines.Load())
	}
}

func batchSlot(i int, now time.Time) Slot {
	return Slot{Task: "batch", ID: strconv.Itoa(i), Time: now.Add(-time.Second), Deadline: now.Add(time.Hour)}
}

// Claims made while the pipelines are busy leave together: 4 lone claims
// fill the flights, the 1000 that follow go in ceil(1000/256) = 4 pipelines.
func TestRedisPipelinesConcurrentClaims(t *testing.T) {
	g := newGate(defaultMaxFlights)
	r, _ := gatedStore(t, g)
	ctx := context.Background()
	now := time.Now()
	p := Policy{Lease: time.Minute, DoneTTL: time.Hour, MaxAttempts: 3}

	const first, rest = defaultMaxFlights, 1000
	results := make(chan error, first+rest)
	claim := func(i int) {
		c, err := r.Claim(ctx, batchSlot(i, now), "r", p)
		if err == nil && (c.Result != Won || c.Attempt != 1) {
			err = errors.New("claim " + strconv.Itoa(i) + ": " + c.Result.String())
		}
		results <- err
	}
	// One at a time: a claim started while an earlier flight has not yet
	// taken its queue would be coalesced into it, and fewer than `first`
	// pipelines would ever enter the gate (the cause of the old hang).
	for i := range first {
		go claim(i)
		awaitEntered(t, g)
	}
	for i := first; i < first+rest; i++ {
		go claim(i)
	}
	awaitQueue(t, r, rest)
	close(g.open)
	for range first + rest {
		select {
		case err := <-results:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("claims did not return")
		}
	}
	if got, want := g.pipelines.Load(), int64(first+(rest+defaultMaxBatch-1)/defaultMaxBatch); got != want {
		t.Errorf("%d claims took %d pipelines, want %d", first+rest, got, want)
	}
	if got := g.commands.Load(); got != first+rest {
		t.Errorf("%d commands sent for %d claims", got, first+rest)
	}
	sts, err := r.States(ctx, []Slot{batchSlot(0, now), batchSlot(first+rest-1, now)})
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range sts {
		if st.Status != "running" || st.Holder != "r" || st.Attempts != 1 {
			t.Errorf("state after a pipelined claim: %+v", st)
		}
	}
}

// A claim whose caller gave up while it queued is never sent: it must not
// win a slot that nobody would then run.
func TestRedisAbandonedClaimIsNotSent(t *testing.T) {
	g := newGate(defaultMaxFlights)
	r, _ := gatedStore(t, g)
	ctx := context.Background()
	now := time.Now()
	p := Policy{Lease: time.Minute, DoneTTL: time.Hour, MaxAttempts: 3}
	var wg sync.WaitGroup
	for i := range defaultMaxFlights {
		wg.Go(func() { _, _ = r.Claim(ctx, batchSlot(i, now), "r", p) })
		awaitEntered(t, g)
	}
	cctx, cancel := context.WithCancel(ctx)
	abandoned := batchSlot(100, now)
	errc := make(chan error, 1)
	go func() {
		_, err := r.Claim(cctx, abandoned, "r", p)
		errc <- err
	}()
	awaitQueue(t, r, 1)
	cancel()
	var err error
	select {
	case err = <-errc:
	case <-time.After(30 * time.Second):
		t.Fatal("abandoned claim did not return")
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("abandoned claim: err %v, want context.Canceled", err)
	}
	close(g.open)
	wg.Wait()
	r.batch.wait()
	st, err := r.State(ctx, abandoned)
	if err != nil {
		t.Fatal(err)
	}
	if st.Status != "free" || st.Attempts != 0 {
		t.Errorf("abandoned claim reached Redis: %+v", st)
	}
	if got := g.commands.Load(); got != defaultMaxFlights+3 { // + the State read: GET, PTTL, GET
		t.Errorf("%d commands sent, want %d", got, defaultMaxFlights+3)
	}
}

// After SCRIPT FLUSH (or a restart) the scripts are resent in full.
func TestRedisPipelineReloadsFlushedScripts(t *testing.T) {
	g := newGate(0)
	r, rdb := gatedStore(t, g)
	ctx := context.Background()
	now := time.Now()
	p := Policy{Lease: time.Minute, DoneTTL: time.Hour, MaxAttempts: 3}
	if _, err := r.Claim(ctx, batchSlot(1, now), "r", p); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	slot := batchSlot(2, now)
	c, err := r.Claim(ctx, slot, "r", p)
	if err != nil || c.Result != Won {
		t.Fatalf("claim after SCRIPT FLUSH: %v %v", c.Result, err)
	}
	if err := r.Complete(ctx, slot, Owner{Replica: "r", Attempt: c.Attempt}, p.DoneTTL); err != nil {
		t.Fatalf("complete after SCRIPT FLUSH: %v", err)
	}
	if st, err := r.State(ctx, slot); err != nil || st.Status != "done" {
		t.Fatalf("state: %+v %v", st, err)
	}
}
