package coalesce_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/coalesce"
)

// gated is a Send that records each batch's requests and holds every round
// trip until open is closed; entered gets one value per round trip.
type gated struct {
	open    chan struct{}
	entered chan struct{}
	mu      sync.Mutex
	batches [][]int
	ctxs    []context.Context
	ended   []error // each round trip's ctx.Err() when the gate let it go
}

func newGated() *gated {
	return &gated{open: make(chan struct{}), entered: make(chan struct{}, 1000)}
}

func (g *gated) send(ctx context.Context, batch []*coalesce.Call[int, int]) {
	reqs := make([]int, len(batch))
	for i, c := range batch {
		reqs[i] = c.Req
	}
	g.mu.Lock()
	g.batches = append(g.batches, reqs)
	g.ctxs = append(g.ctxs, ctx)
	g.mu.Unlock()
	g.entered <- struct{}{}
	<-g.open
	g.mu.Lock()
	g.ended = append(g.ended, ctx.Err())
	g.mu.Unlock()
	for _, c := range batch {
		c.Resp = c.Req * 10
	}
}

func (g *gated) sent() [][]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.batches)
}

func awaitQueued[Req, Resp any](t *testing.T, c *coalesce.Coalescer[Req, Resp], n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if q, _ := c.Pending(); q >= n {
			return
		}
		if time.Now().After(deadline) {
			q, _ := c.Pending()
			t.Fatalf("%d calls queued, want %d", q, n)
		}
	}
}

// A lone request leaves at once, alone, and gets its own answer.
func TestLoneRequestLeavesAlone(t *testing.T) {
	g := newGated()
	close(g.open)
	c := coalesce.New(coalesce.Config[int, int]{Send: g.send})
	defer c.Close()
	got, err := c.Do(context.Background(), 7)
	if err != nil || got != 70 {
		t.Fatalf("Do(7) = %d, %v; want 70", got, err)
	}
	if b := g.sent(); !slices.EqualFunc(b, [][]int{{7}}, slices.Equal) {
		t.Fatalf("batches %v, want [[7]]", b)
	}
}

// Requests that come while the flights are busy queue and leave together,
// MaxBatch at most per round trip, and each caller gets its own answer.
func TestQueuedRequestsLeaveTogether(t *testing.T) {
	g := newGated()
	c := coalesce.New(coalesce.Config[int, int]{Send: g.send, MaxBatch: 4, MaxFlights: 2})
	defer c.Close()
	var wg sync.WaitGroup
	do := func(i int) {
		defer wg.Done()
		if got, err := c.Do(context.Background(), i); err != nil || got != 10*i {
			t.Errorf("Do(%d) = %d, %v", i, got, err)
		}
	}
	wg.Add(2)
	go do(0)
	<-g.entered
	go do(1)
	<-g.entered // both flights held
	wg.Add(10)
	for i := 2; i < 12; i++ {
		go do(i)
	}
	awaitQueued(t, c, 10)
	close(g.open)
	wg.Wait()
	b := g.sent()
	if len(b) != 2+3 { // ceil(10/4) round trips after the first two
		t.Fatalf("%d round trips %v, want 5", len(b), b)
	}
	for _, x := range b[2:] {
		if len(x) > 4 {
			t.Errorf("round trip of %d requests: over MaxBatch", len(x))
		}
	}
}

// Requests marked Later leave after every other queued one.
func TestLaterRequestsLeaveLast(t *testing.T) {
	g := newGated()
	c := coalesce.New(coalesce.Config[int, int]{Send: g.send, MaxBatch: 3, Later: func(r int) bool { return r >= 100 }})
	defer c.Close()
	go c.Do(context.Background(), 0)
	<-g.entered
	calls := c.Queue(context.Background(), 100, 101, 1, 102, 2)
	awaitQueued(t, c, 5)
	close(g.open)
	for _, call := range calls {
		if _, err := call.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	want := [][]int{{0}, {1, 2, 100}, {101, 102}}
	if b := g.sent(); !slices.EqualFunc(b, want, slices.Equal) {
		t.Fatalf("batches %v, want %v", b, want)
	}
}

// A request whose context ends while it queues is answered with the
// context's error and never sent.
func TestAbandonedRequestIsNotSent(t *testing.T) {
	g := newGated()
	c := coalesce.New(coalesce.Config[int, int]{Send: g.send})
	defer c.Close()
	go c.Do(context.Background(), 0)
	<-g.entered
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := c.Do(ctx, 1); errc <- err }()
	awaitQueued(t, c, 1)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("abandoned Do: %v, want context.Canceled", err)
	}
	if got, err := c.Do(ctx, 2); !errors.Is(err, context.Canceled) || got != 0 {
		t.Fatalf("Do on an ended context = %d, %v", got, err)
	}
	close(g.open)
	if got, err := c.Do(context.Background(), 3); err != nil || got != 30 {
		t.Fatalf("Do(3) = %d, %v", got, err)
	}
	for _, b := range g.sent() {
		if slices.Contains(b, 1) || slices.Contains(b, 2) {
			t.Fatalf("an abandoned request was sent: %v", g.sent())
		}
	}
}

// A round trip runs under the latest deadline among its requests, a
// request without one counting as Limit; a round trip serving one caller
// ends with that caller's context, one serving several does not.
func TestRoundTripDeadline(t *testing.T) {
	g := newGated()
	c := coalesce.New(coalesce.Config[int, int]{Send: g.send, Limit: time.Hour})
	defer c.Close()
	lone, cancelLone := context.WithCancel(context.Background())
	go c.Do(lone, 0)
	<-g.entered
	near, cancel1 := context.WithTimeout(context.Background(), time.Minute)
	defer cancel1()
	far, cancel2 := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel2()
	calls := c.Queue(near, 1)
	calls = append(calls, c.Queue(far, 2)...)
	awaitQueued(t, c, 2)
	cancelLone()
	close(g.open)
	for _, call := range calls {
		call.Wait()
	}
	g.mu.Lock()
	both := g.ctxs[1]
	lonely, shared := g.ended[0], g.ended[1]
	g.mu.Unlock()
	if lonely == nil {
		t.Error("a lone caller's round trip did not end with its context")
	}
	if shared != nil {
		t.Errorf("a round trip of two callers ended with one of them: %v", shared)
	}
	d, ok := both.Deadline()
	if want, _ := far.Deadline(); !ok || !d.Equal(want) {
		t.Errorf("round trip deadline %v, want the latest of its calls' (%v)", d, want)
	}
	start := time.Now()
	c.Do(context.Background(), 9)
	g.mu.Lock()
	d, ok = g.ctxs[2].Deadline()
	g.mu.Unlock()
	if !ok || d.Before(start.Add(time.Hour)) || d.After(time.Now().Add(time.Hour)) {
		t.Errorf("round trip of a call without deadline: deadline %v, want Limit from its start", d)
	}
}

// Close waits for the requests queued before it, which are sent, and
// answers later ones ErrClosed.
func TestCloseDrainsThenRefuses(t *testing.T) {
	g := newGated()
	c := coalesce.New(coalesce.Config[int, int]{Send: g.send})
	go c.Do(context.Background(), 0)
	<-g.entered
	calls := c.Queue(context.Background(), 1, 2)
	awaitQueued(t, c, 2)
	closed := make(chan struct{})
	go func() { c.Close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("Close returned with round trips in flight")
	case <-time.After(20 * time.Millisecond):
	}
	close(g.open)
	<-closed
	for _, call := range calls {
		if got, err := call.Wait(); err != nil || got != call.Req*10 {
			t.Fatalf("call queued before Close: %d, %v", got, err)
		}
	}
	if _, err := c.Do(context.Background(), 3); !errors.Is(err, coalesce.ErrClosed) {
		t.Fatalf("Do after Close: %v, want ErrClosed", err)
	}
	if q, f := c.Pending(); q != 0 || f != 0 {
		t.Fatalf("after Close: %d queued, %d flights", q, f)
	}
}

// The shape of a history writer: entries appended while one transaction
// is in flight leave together in the next, so a burst of completions costs
// a few round trips. (Send here prints instead of writing a pipeline.)
func Example() {
	type entry struct{ task, outcome string }
	inFlight := make(chan struct{})
	release := make(chan struct{})
	w := coalesce.New(coalesce.Config[entry, struct{}]{
		MaxBatch:   256, // flush at most this many per transaction
		MaxFlights: 1,   // one transaction at a time: the first waiter goes at once
		Send: func(ctx context.Context, batch []*coalesce.Call[entry, struct{}]) {
			fmt.Printf("one transaction of %d entries\n", len(batch))
			if len(batch) == 1 {
				close(inFlight)
				<-release
			}
			// a real writer sets each call's Err from its command
		},
	})
	defer w.Close()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); w.Do(context.Background(), entry{"nightly", "success"}) }()
	<-inFlight
	calls := w.Queue(context.Background(), entry{"a", "success"}, entry{"b", "failure"}, entry{"c", "success"})
	close(release)
	for _, c := range calls {
		c.Wait()
	}
	wg.Wait()
	// Output:
	// one transaction of 1 entries
	// one transaction of 3 entries
}
