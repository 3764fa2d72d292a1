package redislock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/scheduler/history"
)

// gateHook counts round trips and holds the first one until open is closed.
type gateHook struct {
	trips atomic.Int32
	held  atomic.Int32 // the appends in the first round trip, while it is held
	first sync.Once
	open  chan struct{}
}

func (g *gateHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (g *gateHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

// isAppend reports whether c is a history append: XADD, or a stream's
// first append (history_append.lua, by hash).
func isAppend(c redis.Cmder) bool { return c.Name() == "xadd" || c.Name() == "evalsha" }

// ProcessPipelineHook counts the round trips that carry appends (a new
// connection's handshake is a pipeline too, and is not counted).
func (g *gateHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if slices.ContainsFunc(cmds, isAppend) {
			g.trips.Add(1)
			g.first.Do(func() {
				n := 0
				for _, c := range cmds {
					if isAppend(c) {
						n++
					}
				}
				g.held.Store(int32(n))
				<-g.open
			})
		}
		return next(ctx, cmds)
	}
}

// Appends made while one is in flight leave together: with the first
// round trip held until the others have queued, 300 appends take 3 round
// trips (usually 1 alone, then 256 and 43), every entry is written
// with its TTL, and an append whose context ends while it waits gives up
// without taking the others down.
func TestRedisHistoryBatchesAppends(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	g := &gateHook{open: make(chan struct{})}
	rdb.AddHook(g)
	h := NewHistory(rdb, "slotd", time.Hour)
	ctx := context.Background()

	const n = 300
	errs := make(chan error, n+1)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			task := fmt.Sprintf("t%d", i%7)
			errs <- h.Append(ctx, task, history.Entry{Slot: fmt.Sprint(i), Attempt: 1, Outcome: "success", Started: time.Now()})
		}()
	}
	// One more, whose context ends while it waits in the queue.
	gone, cancel := context.WithCancel(ctx)
	// The first round trip leaves at once and is held; how many appends
	// it took depends on how fast the goroutines came (usually 1).
	queued := func(k int) bool {
		q, _ := h.out.Pending()
		held := int(g.held.Load())
		return held > 0 && q+held >= k
	}
	awaitTrue(t, "every append queued or in the held first round trip", func() bool { return queued(n) })
	wg.Add(1)
	go func() {
		defer wg.Done()
		errs <- h.Append(gone, "gone", history.Entry{Slot: "x", Attempt: 1, Outcome: "success"})
	}()
	awaitTrue(t, "the 301st append queued", func() bool { return queued(n + 1) })
	cancel()
	awaitTrue(t, "the cancelled append answered while queued", func() bool { return len(errs) == 1 })
	close(g.open)
	wg.Wait()
	close(errs)
	failed := 0
	for err := range errs {
		if err != nil {
			if !errors.Is(err, context.Canceled) {
				t.Errorf("append: %v", err)
			}
			failed++
		}
	}
	if failed != 1 {
		t.Errorf("%d appends failed, want only the cancelled one", failed)
	}
	held := int(g.held.Load())
	if got, want := int(g.trips.Load()), 1+(n-held+255)/256; got != want {
		t.Errorf("%d appends took %d round trips, want %d (%d in the first, then batches of up to 256)", n, got, want, held)
	}
	total := 0
	for i := range 7 {
		key := HistoryKey("slotd", fmt.Sprintf("t%d", i))
		total += int(rdb.XLen(ctx, key).Val())
		if ttl := rdb.PTTL(ctx, key).Val(); ttl <= 0 {
			t.Errorf("%s has no TTL (%v)", key, ttl)
		}
	}
	if total != n {
		t.Errorf("%d entries written, want %d", total, n)
	}
	if rdb.Exists(ctx, HistoryKey("slotd", "gone")).Val() != 0 {
		t.Error("the cancelled append was written")
	}
}

// A command that fails on its own fails only its own append.
func TestRedisHistoryForeignKeyFailsOnlyItsAppend(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	ctx := context.Background()
	if err := rdb.Set(ctx, HistoryKey("slotd", "foreign"), "not a stream", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	g := &gateHook{open: make(chan struct{})}
	rdb.AddHook(g)
	h := NewHistory(rdb, "slotd", time.Hour)
	res := map[string]chan error{}
	for _, task := range []string{"first", "foreign", "fine"} {
		ch := make(chan error, 1)
		res[task] = ch
		go func() { ch <- h.Append(ctx, task, history.Entry{Slot: "1", Attempt: 1, Outcome: "success"}) }()
		if task == "first" {
			awaitTrue(t, "the first append in flight", func() bool { return g.trips.Load() == 1 })
		}
	}
	awaitTrue(t, "two appends queued", func() bool { q, _ := h.out.Pending(); return q == 2 })
	close(g.open)
	if err := <-res["first"]; err != nil {
		t.Errorf("first: %v", err)
	}
	if err := <-res["fine"]; err != nil {
		t.Errorf("fine, batched with a failing append: %v", err)
	}
	if err := <-res["foreign"]; err == nil {
		t.Error("append to a key of another type: no error")
	}
	if g.trips.Load() != 2 {
		t.Errorf("%d round trips, want 2", g.trips.Load())
	}
}

func awaitTrue(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
	}
}
