package redislock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/memlock"
)

// gate is a go-redis hook that counts round trips (a pipeline, or one
// command alone), the commands in them by name, the connections dialled,
// and the round trips sent without a deadline; it holds the first `hold`
// round trips until it is opened, so a test can fill the batcher's flights
// and watch what queues behind them. A connection's handshake (HELLO,
// CLIENT ...) is passed through and not counted.
type gate struct {
	hold       int64
	entered    chan struct{}
	open       chan struct{}
	trips      atomic.Int64
	commands   atomic.Int64
	dials      atomic.Int64
	noDeadline atomic.Int64
	armed      atomic.Bool // counts and holds nothing until armed

	mu    sync.Mutex
	names map[string]int
	sent  [][]redis.Cmder // each round trip's commands, as they entered
}

func newGate(hold int) *gate {
	return &gate{hold: int64(hold), entered: make(chan struct{}, hold), open: make(chan struct{}), names: map[string]int{}}
}

func handshake(cmd redis.Cmder) bool { return cmd.Name() == "hello" || cmd.Name() == "client" }

func (g *gate) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if g.armed.Load() {
			g.dials.Add(1)
		}
		return next(ctx, network, addr)
	}
}

func (g *gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if g.armed.Load() && !handshake(cmd) {
			g.trip(ctx, []redis.Cmder{cmd})
		}
		return next(ctx, cmd)
	}
}

func (g *gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if g.armed.Load() && !handshake(cmds[0]) {
			g.trip(ctx, cmds)
		}
		return next(ctx, cmds)
	}
}

func (g *gate) trip(ctx context.Context, cmds []redis.Cmder) {
	if _, ok := ctx.Deadline(); !ok {
		g.noDeadline.Add(1)
	}
	if n := g.trips.Add(1); n <= g.hold {
		g.entered <- struct{}{}
		select { // never hold forever: a stuck test fails, it does not hang
		case <-g.open:
		case <-time.After(30 * time.Second):
		}
	}
	g.commands.Add(int64(len(cmds)))
	g.mu.Lock()
	g.sent = append(g.sent, cmds)
	for _, c := range cmds {
		name := fmt.Sprint(c.Args()[0])
		if strings.EqualFold(name, "script") { // SCRIPT LOAD, SCRIPT FLUSH
			name += " " + fmt.Sprint(c.Args()[1])
		}
		g.names[strings.ToLower(name)]++
	}
	g.mu.Unlock()
}

func (g *gate) count(name string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.names[name]
}

var _ redis.Hook = (*gate)(nil)

func gatedStore(t *testing.T, g *gate) (*Store, *redis.Client) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 16, ContextTimeoutEnabled: true})
	rdb.AddHook(g)
	t.Cleanup(func() { rdb.Close() })
	r := New(rdb, "slotd")
	t.Cleanup(func() { r.Close() })
	// Warm the script cache so counts see no NOSCRIPT resend.
	p := lock.Policy{Lease: time.Minute, DoneTTL: time.Hour, MaxAttempts: 3}
	now := time.Now()
	warm := lock.Slot{Task: "warm", ID: "0", Time: now.Add(-time.Second), Deadline: now.Add(time.Hour)}
	ctx := context.Background()
	c, err := r.Claim(ctx, warm, "w", p)
	if err != nil {
		t.Fatal(err)
	}
	o := lock.Owner{ID: "w", Attempt: c.Attempt}
	if err := r.Renew(ctx, warm, o, p.Lease); err != nil {
		t.Fatal(err)
	}
	if err := r.Release(ctx, warm, o); err != nil {
		t.Fatal(err)
	}
	g.armed.Store(true)
	return r, rdb
}

func queued(r *Store) int {
	n, _ := r.batch.co.Pending()
	return n
}

// awaitQueue waits until n calls are queued behind the held flights.
func awaitQueue(t *testing.T, r *Store, n int) {
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
		t.Fatalf("%d round trips entered the gate, want more", g.trips.Load())
	}
}

// fillFlights sends defaultMaxFlights lone claims (slots 0 to 3), one at a
// time, each held by the gate: what is called next queues behind them.
func fillFlights(t *testing.T, r *Store, g *gate, now time.Time, p lock.Policy) *sync.WaitGroup {
	t.Helper()
	var wg sync.WaitGroup
	for i := range defaultMaxFlights {
		wg.Go(func() { _, _ = r.Claim(context.Background(), batchSlot(i, now), "r", p) })
		awaitEntered(t, g)
	}
	return &wg
}

func batchSlot(i int, now time.Time) lock.Slot {
	return lock.Slot{Task: "batch", ID: strconv.Itoa(i), Time: now.Add(-time.Second), Deadline: now.Add(time.Hour)}
}

// Claims made while the round trips are busy leave together: 4 lone claims
// fill the flights, the 1000 that follow go in ceil(1000/256) = 4 round
// trips, each one fused EVALSHA.
func TestRedisPipelinesConcurrentClaims(t *testing.T) {
	g := newGate(defaultMaxFlights)
	r, _ := gatedStore(t, g)
	ctx := context.Background()
	now := time.Now()
	p := lock.Policy{Lease: time.Minute, DoneTTL: time.Hour, MaxAttempts: 3}

	const first, rest = defaultMaxFlights, 1000
	results := make(chan error, first+rest)
	claim := func(i int) {
		c, err := r.Claim(ctx, batchSlot(i, now), "r", p)
		if err == nil && (c.Result != lock.Won || c.Attempt != 1) {
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
	if got, want := g.trips.Load(), int64(first+(rest+defaultMaxBatch-1)/defaultMaxBatch); got != want {
		t.Errorf("%d claims took %d round trips, want %d", first+rest, got, want)
	}
	// Each round trip's claims are fused into one EVALSHA (see fuse.go).
	fused := first + (rest+defaultMaxBatch-1)/defaultMaxBatch
	if got := g.count("evalsha"); got != fused {
		t.Errorf("%d EVALSHA sent for %d claims, want %d", got, first+rest, fused)
	}
	if got := g.commands.Load(); got != int64(fused) {
		t.Errorf("%d commands sent for %d claims, want %d", got, first+rest, fused)
	}
	sts, err := r.States(ctx, []lock.Slot{batchSlot(0, now), batchSlot(first+rest-1, now)})
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range sts {
		if st.Status != "running" || st.Holder != "r" || st.Attempts != 1 {
			t.Errorf("state after a pipelined claim: %+v", st)
		}
	}
}

// A renewal queued behind a burst's claims leaves before them, in the first
// round trip that takes from the queue, with the claims it has room for:
// renewals, completions and releases keep or finish work already won, and
// must not wait for ten thousand claims of new work.
func TestRedisSendsQueuedRenewalBeforeClaims(t *testing.T) {
	g := newGate(defaultMaxFlights)
	r, _ := gatedStore(t, g)
	ctx := context.Background()
	now := time.Now()
	p := lock.Policy{Lease: time.Minute, DoneTTL: time.Hour, MaxAttempts: 3}
	own := batchSlot(100, now)
	g.armed.Store(false) // this claim is neither held nor counted
	c, err := r.Claim(ctx, own, "r", p)
	if err != nil || c.Result != lock.Won {
		t.Fatalf("claim: %v %v", c.Result, err)
	}
	g.armed.Store(true)
	wg := fillFlights(t, r, g, now, p)

	const claims = 2*defaultMaxBatch + 10
	reqs := make([]lock.ClaimRequest, claims)
	for i := range reqs {
		reqs[i] = lock.ClaimRequest{Slot: batchSlot(200+i, now), Owner: "r", Policy: p}
	}
	won := make(chan int, 1)
	go func() {
		n := 0
		r.ClaimMany(ctx, reqs, func(_ int, rep lock.ClaimReply) {
			if rep.Err == nil && rep.Result == lock.Won {
				n++
			}
		})
		won <- n
	}()
	awaitQueue(t, r, claims)
	renewed := make(chan error, 1)
	go func() { renewed <- r.Renew(ctx, own, lock.Owner{ID: "r", Attempt: c.Attempt}, p.Lease) }()
	awaitQueue(t, r, claims+1)
	close(g.open)
	if err := <-renewed; err != nil {
		t.Fatalf("renew: %v", err)
	}
	if n := <-won; n != claims {
		t.Fatalf("%d of %d claims won", n, claims)
	}
	wg.Wait()

	// Count the claims in the round trip that carried the renewal: a
	// fused claim EVALSHA has 3 keys a slot. In the order of arrival it
	// would have left last, with the 10 claims left over.
	g.mu.Lock()
	defer g.mu.Unlock()
	found := false
	for _, trip := range g.sent {
		with, slots := false, 0
		for _, cmd := range trip {
			a := cmd.Args()
			if len(a) < 3 || !strings.EqualFold(fmt.Sprint(a[0]), "evalsha") {
				continue
			}
			switch a[1] {
			case renewScript.Hash():
				with = true
			case claimScript.Hash():
				keys, _ := strconv.Atoi(fmt.Sprint(a[2]))
				slots += keys / 3
			}
		}
		if with {
			found = true
			if slots != defaultMaxBatch-1 {
				t.Errorf("the renewal left with %d claims, want %d: it waited behind claims queued before it", slots, defaultMaxBatch-1)
			}
		}
	}
	if !found {
		t.Fatal("no round trip carried the renewal")
	}
}

// A claim whose caller gave up while it queued is never sent: it must not
// win a slot that nobody would then run.
func TestRedisAbandonedClaimIsNotSent(t *testing.T) {
	g := newGate(defaultMaxFlights)
	r, _ := gatedStore(t, g)
	ctx := context.Background()
	now := time.Now()
	p := lock.Policy{Lease: time.Minute, DoneTTL: time.Hour, MaxAttempts: 3}
	wg := fillFlights(t, r, g, now, p)
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
	r.batch.close()
	st, err := lock.ReadState(ctx, r, abandoned)
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
	p := lock.Policy{Lease: time.Minute, DoneTTL: time.Hour, MaxAttempts: 3}
	if _, err := r.Claim(ctx, batchSlot(1, now), "r", p); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	slot := batchSlot(2, now)
	c, err := r.Claim(ctx, slot, "r", p)
	if err != nil || c.Result != lock.Won {
		t.Fatalf("claim after SCRIPT FLUSH: %v %v", c.Result, err)
	}
	if err := r.Complete(ctx, slot, lock.Owner{ID: "r", Attempt: c.Attempt}, p.DoneTTL); err != nil {
		t.Fatalf("complete after SCRIPT FLUSH: %v", err)
	}
	if st, err := lock.ReadState(ctx, r, slot); err != nil || st.Status != "done" {
		t.Fatalf("state: %+v %v", st, err)
	}
}

// After SCRIPT FLUSH a pipeline's calls answered NOSCRIPT are resent by
// hash once the script is loaded: one SCRIPT LOAD per script, not one EVAL
// carrying the script's source per call. The renewals and releases queued
// together leave as a pipeline of two fused EVALSHAs, both answered
// NOSCRIPT and both resent.
func TestRedisPipelineLoadsFlushedScriptOnce(t *testing.T) {
	g := newGate(defaultMaxFlights)
	r, rdb := gatedStore(t, g)
	ctx := context.Background()
	now := time.Now()
	p := lock.Policy{Lease: time.Minute, DoneTTL: time.Hour, MaxAttempts: 3}
	const n = 10 // the even slots renewed, the odd ones released
	owners := make([]lock.Owner, n)
	g.armed.Store(false) // these claims are neither held nor counted
	for i := range n {
		c, err := r.Claim(ctx, batchSlot(100+i, now), "r", p)
		if err != nil || c.Result != lock.Won {
			t.Fatalf("claim: %v %v", c.Result, err)
		}
		owners[i] = lock.Owner{ID: "r", Attempt: c.Attempt}
	}
	g.armed.Store(true)
	wg := fillFlights(t, r, g, now, p)
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, n)
	for i := range n {
		go func() {
			if i%2 == 0 {
				errs <- r.Renew(ctx, batchSlot(100+i, now), owners[i], 2*p.Lease)
			} else {
				errs <- r.Release(ctx, batchSlot(100+i, now), owners[i])
			}
		}()
	}
	awaitQueue(t, r, n)
	close(g.open)
	for range n {
		if err := <-errs; err != nil {
			t.Errorf("renew or release after SCRIPT FLUSH: %v", err)
		}
	}
	wg.Wait()
	// The held lone claims ran after the flush too: a lone EVALSHA
	// answered NOSCRIPT is resent as EVAL, as go-redis's Script.Run does,
	// which loads the claim script for the lone claims after it.
	if got := g.count("script load"); got != 2 {
		t.Errorf("SCRIPT LOAD sent %d times, want twice (renew, release)", got)
	}
	if got := g.count("eval"); got < 1 || got > defaultMaxFlights {
		t.Errorf("EVAL sent %d times, want 1 to %d (the lone claims only)", got, defaultMaxFlights)
	}
	if got, want := g.count("evalsha"), defaultMaxFlights+2*2; got != want {
		t.Errorf("EVALSHA sent %d times, want %d", got, want)
	}
	for i := range n {
		st, err := lock.ReadState(ctx, r, batchSlot(100+i, now))
		switch {
		case err != nil:
			t.Fatal(err)
		case i%2 == 0 && (st.Status != "running" || st.TTL <= p.Lease):
			t.Errorf("slot %d after a renewal to %v: %+v", i, 2*p.Lease, st)
		case i%2 == 1 && st.Status != "free":
			t.Errorf("slot %d after its release: %+v", i, st)
		}
	}
}

// Every round trip has a deadline, also when the callers set none: a lone
// call and a pipeline of calls (claims and releases, one fused EVALSHA
// each) made with context.Background.
func TestRedisEveryRoundTripHasADeadline(t *testing.T) {
	g := newGate(defaultMaxFlights)
	r, _ := gatedStore(t, g)
	now := time.Now()
	p := lock.Policy{Lease: time.Minute, DoneTTL: time.Hour, MaxAttempts: 3}
	wg := fillFlights(t, r, g, now, p) // context.Background
	for i := range 3 {
		wg.Go(func() { _, _ = r.Claim(context.Background(), batchSlot(100+i, now), "r", p) })
		wg.Go(func() {
			_ = r.Release(context.Background(), batchSlot(200+i, now), lock.Owner{ID: "r", Attempt: 1})
		})
	}
	awaitQueue(t, r, 6)
	close(g.open)
	wg.Wait()
	if g.trips.Load() != defaultMaxFlights+1 || g.commands.Load() != defaultMaxFlights+2 {
		t.Fatalf("%d round trips, %d commands; want %d, %d", g.trips.Load(), g.commands.Load(), defaultMaxFlights+1, defaultMaxFlights+2)
	}
	if n := g.noDeadline.Load(); n != 0 {
		t.Errorf("%d round trips sent without a deadline", n)
	}
}

// freshStore is a store on a new server, its client counted by g (not yet
// armed), with no script loaded and no command sent.
func freshStore(t *testing.T, g *gate) *Store {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	rdb.AddHook(g)
	t.Cleanup(func() { rdb.Close() })
	r := New(rdb, "slotd")
	t.Cleanup(func() { r.Close() })
	return r
}

// claimRenewComplete runs one slot's success path, one call at a time.
func claimRenewComplete(t *testing.T, ctx context.Context, r *Store) {
	t.Helper()
	now := time.Now()
	p := lock.Policy{Lease: time.Minute, DoneTTL: time.Hour, MaxAttempts: 3}
	slot := batchSlot(1, now)
	c, err := r.Claim(ctx, slot, "r", p)
	if err != nil || c.Result != lock.Won {
		t.Fatalf("claim: %v %v", c.Result, err)
	}
	o := lock.Owner{ID: "r", Attempt: c.Attempt}
	if err := r.Renew(ctx, slot, o, p.Lease); err != nil {
		t.Fatal(err)
	}
	if err := r.Complete(ctx, slot, o, p.DoneTTL); err != nil {
		t.Fatal(err)
	}
}

// A lone call is a plain EVALSHA on the connection the store's other
// commands keep warm, not a pipeline, which go-redis serves from a pool of
// its own: a claim must not wait for a new connection's handshake.
func TestRedisLoneCallDialsNothing(t *testing.T) {
	g := newGate(0)
	r := freshStore(t, g)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := r.Time(ctx); err != nil { // as the clock check does
		t.Fatal(err)
	}
	g.armed.Store(true)
	claimRenewComplete(t, ctx, r)
	if n := g.dials.Load(); n != 0 {
		t.Errorf("a lone claim, renew and complete dialled %d new connections", n)
	}
	if n := g.trips.Load() - int64(g.count("eval")); n != 3 { // a fresh server: EVALSHA, NOSCRIPT, EVAL for each
		t.Errorf("%d EVALSHA round trips for 3 lone calls", n)
	}
}

// Close and calls racing it: every call either runs or fails with
// errClosed, Close waits for what it let in, and no round trip starts
// after it returns (under -race, a flight started after Close's Wait
// began is a reported misuse of the WaitGroup).
func TestRedisCloseRacesCalls(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 16, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	now := time.Now()
	p := lock.Policy{Lease: time.Minute, DoneTTL: time.Hour, MaxAttempts: 3}
	ran, refused := 0, 0
	for round := range 20 {
		r := New(rdb, "slotd")
		results := make(chan error, 50)
		for i := range 50 {
			go func() {
				_, err := r.Claim(ctx, batchSlot(round*100+i, now), "r", p)
				results <- err
			}()
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		left, flights := r.batch.co.Pending()
		if left != 0 || flights != 0 {
			t.Fatalf("after Close: %d calls queued, %d flights", left, flights)
		}
		for range 50 {
			switch err := <-results; {
			case err == nil:
				ran++
			case errors.Is(err, errClosed):
				refused++
			default:
				t.Fatalf("claim racing Close: %v", err)
			}
		}
		if _, err := r.Claim(ctx, batchSlot(round*100+99, now), "r", p); !errors.Is(err, errClosed) {
			t.Fatalf("claim after Close: %v, want errClosed", err)
		}
	}
	t.Logf("claims racing Close: %d ran, %d refused", ran, refused)
}

// ClaimMany queues a burst's claims at once: 500 claims leave in
// ceil(500/256) = 2 round trips of one fused EVALSHA each, and each request gets its own answer —
// won, held by the peer that claimed first, or the foreign value planted
// in one slot's key — in order. Memory, which cannot batch, answers the
// same through Store.Claim.
func TestClaimManyAnswersEachInFewRoundTrips(t *testing.T) {
	g := newGate(0)
	r, rdb := gatedStore(t, g)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	now := time.Now()
	p := lock.Policy{Lease: time.Minute, DoneTTL: time.Hour, MaxAttempts: 3}
	const n, foreign = 500, 7
	reqs := make([]lock.ClaimRequest, n)
	for i := range reqs {
		reqs[i] = lock.ClaimRequest{Slot: batchSlot(i, now), Owner: "r", Policy: p}
	}
	mem := memlock.New(time.Now)
	for _, s := range []lock.Store{r, mem} {
		for i := 0; i < n; i += 2 { // the peer holds the even slots
			if c, err := s.Claim(ctx, reqs[i].Slot, "peer", p); err != nil || c.Result != lock.Won {
				t.Fatalf("peer claim %d: %v %v", i, c.Result, err)
			}
		}
	}
	state, _ := Keys("slotd", reqs[foreign].Slot)
	if err := rdb.Set(ctx, state, "not ours", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	mem.Set(state, "not ours", time.Hour)

	for _, s := range []lock.Store{r, mem} {
		trips, evalsha := g.trips.Load(), g.count("evalsha")
		replies := claimAll(ctx, s, reqs)
		if s == lock.Store(r) {
			if got := g.trips.Load() - trips; got != 2 {
				t.Errorf("Redis: %d claims took %d round trips, want 2", n, got)
			}
			if got := g.count("evalsha") - evalsha; got != 2 {
				t.Errorf("Redis: %d claims took %d EVALSHA, want 2 (fused)", n, got)
			}
		}
		for i, rep := range replies {
			switch {
			case i == foreign:
				if !errors.Is(rep.Err, lock.ErrForeign) {
					t.Errorf("%T: claim %d of a foreign key: %v, %v; want ErrForeign", s, i, rep.Result, rep.Err)
				}
			case rep.Err != nil:
				t.Errorf("%T: claim %d: %v", s, i, rep.Err)
			case i%2 == 0 && (rep.Result != lock.Held || rep.Holder != "peer"):
				t.Errorf("%T: claim %d: %v held by %q, want held by peer", s, i, rep.Result, rep.Holder)
			case i%2 == 1 && (rep.Result != lock.Won || rep.Attempt != 1):
				t.Errorf("%T: claim %d: %v attempt %d, want won attempt 1", s, i, rep.Result, rep.Attempt)
			}
		}
	}
}

// claimAll is ClaimMany, collected; it checks that f saw each index once.
func claimAll(ctx context.Context, s lock.Store, reqs []lock.ClaimRequest) []lock.ClaimReply {
	out := make([]lock.ClaimReply, len(reqs))
	seen := make([]bool, len(reqs))
	lock.ClaimMany(ctx, s, reqs, func(i int, r lock.ClaimReply) {
		if seen[i] {
			panic("ClaimMany: reply " + strconv.Itoa(i) + " twice")
		}
		seen[i], out[i] = true, r
	})
	for i, ok := range seen {
		if !ok {
			out[i].Err = errors.New("ClaimMany: no reply")
		}
	}
	return out
}

// A watch with OnChange calls its function with Released on a release (and
// on an operator's rerun) instead of signalling C, and Redis never with
// Completed or Taken: it sends no notice of a won claim, even once the
// store has announced a replica, nor of a completion (Memory sends
// Completed). The rerun that follows the completion is the notice awaited:
// one published before it would be queued ahead of it. A stopped watch
// calls nothing.
func TestWatchOnChange(t *testing.T) {
	r, _ := gatedStore(t, newGate(0))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.Subscribe(ctx); err != nil {
		t.Fatal(err)
	}
	// Taken notices started with the store's first announce, before.
	if _, err := r.Announce(ctx, "r", "i1", time.Minute); err != nil {
		t.Fatal(err)
	}
	p := lock.Policy{Lease: time.Minute, DoneTTL: time.Hour, MaxAttempts: 5}
	for _, s := range []lock.Store{r, memlock.New(time.Now)} {
		slot := batchSlot(1, time.Now())
		w := s.Watch(slot)
		notices := make(chan lock.Change, 8)
		w.OnChange(func(c lock.Change) { notices <- c })
		// finish claims the slot and releases it, or completes it if done.
		finish := func(done bool) {
			c, err := s.Claim(ctx, slot, "r", p)
			if err == nil && c.Result != lock.Won {
				err = errors.New("claim: " + c.Result.String())
			}
			if err == nil && done {
				err = s.Complete(ctx, slot, lock.Owner{ID: "r", Attempt: c.Attempt}, p.DoneTTL)
			} else if err == nil {
				err = s.Release(ctx, slot, lock.Owner{ID: "r", Attempt: c.Attempt})
			}
			if err != nil {
				t.Fatalf("%T: %v", s, err)
			}
		}
		for _, done := range []bool{false, true} {
			finish(done)
			wantAll := []lock.Change{lock.Released}
			if done {
				if _, err := s.Rerun(ctx, slot, false); err != nil {
					t.Fatal(err)
				}
				if _, ok := s.(*memlock.Store); ok {
					wantAll = []lock.Change{lock.Completed, lock.Released}
				}
			}
			var got []lock.Change
			for len(got) < len(wantAll) {
				select {
				case c := <-notices:
					got = append(got, c)
				case <-ctx.Done():
					t.Fatalf("%T: OnChange not called; got %v", s, got)
				}
			}
			if !slices.Equal(got, wantAll) || len(notices) != 0 {
				t.Errorf("%T: notices %v and %d more queued, want %v alone", s, got, len(notices), wantAll)
			}
		}
		if len(w.C()) != 0 {
			t.Errorf("%T: C signalled although OnChange was set", s)
		}
		w.Stop()
		// The Redis notification is asynchronous: a watch added after the
		// stop proves the notices before it were delivered.
		w2 := s.Watch(slot)
		finish(false)
		select {
		case <-w2.C():
		case <-ctx.Done():
			t.Fatalf("%T: release not signalled", s)
		}
		w2.Stop()
		if len(notices) != 0 {
			t.Errorf("%T: a stopped watch's OnChange was called", s)
		}
	}
}
