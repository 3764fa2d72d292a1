package observe_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/internal/observe"
	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/redislock"
	"github.com/slotd/slotd/scheduler"
	"github.com/slotd/slotd/tasks"
)

// rss is the process's resident set, in bytes, from /proc.
func rss(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip("no /proc/self/status")
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// A measurement, not a check (docs/performance.md): 32 clients for
// SLOTD_FLOOD (default 20s) ask a task's history pages, each with a
// cursor of its own, of a task whose 1000 entries each hold 64 KiB of
// output, in Redis, while the same process runs a task of a second; it
// logs the process's peak RSS, the answers, and the task's attempts and
// missed slots.
// Run with SLOTD_MEASURE=1.
func TestMeasureReadFloodRSS(t *testing.T) {
	if os.Getenv("SLOTD_MEASURE") == "" {
		t.Skip("a measurement: set SLOTD_MEASURE=1")
	}
	dur := 20 * time.Second
	if d, err := time.ParseDuration(os.Getenv("SLOTD_FLOOD")); err == nil {
		dur = d
	}
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	task := statusTask(t, "t", "@every 1m", 3, 48*time.Hour)
	start := time.Now().Add(-1000 * time.Minute).Truncate(time.Minute)
	output := strings.Repeat("o", 64<<10)
	for k := range 1000 {
		at := start.Add(time.Duration(k) * time.Minute)
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: redislock.HistoryKey("slotd", "t"), ID: fmt.Sprintf("%d-0", at.UnixMilli()), Values: []string{
			"slot", at.Format("200601021504"), "slot_time", at.Format(time.RFC3339), "attempt", "1",
			"token", strconv.FormatInt(lock.Token(at, 1), 10), "replica", "r1", "outcome", "failure",
			"started", at.Format(time.RFC3339Nano), "duration_ms", "1200", "error", "exit status 1", "output", output,
		}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	st := redislock.New(rdb, "slotd")
	hist := redislock.NewHistory(rdb, "slotd", time.Hour)
	t.Cleanup(hist.Close)
	// A task of a second, run by the same process meanwhile: what the
	// flood costs the slots.
	tick := statusTask(t, "tick", "@every 1s", 3, time.Hour)
	tick.Job = tasks.TaskFunc(func(context.Context) error { return nil })
	sched := scheduler.New([]scheduler.Task{task, tick}, st, scheduler.WithReplica("r1"), scheduler.WithLogger(slog.New(slog.DiscardHandler)))
	hs := httptest.NewServer(observe.Handler(observe.Daemon{Scheduler: sched, Store: st, History: hist, Replica: "r1"}))
	t.Cleanup(hs.Close)
	sctx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- sched.Run(sctx) }()
	defer func() { stop(); <-ran }()

	base := rss(t)
	var peak atomic.Int64
	peak.Store(base)
	var codes sync.Map // code -> *atomic.Int64
	end := time.Now().Add(dur)
	var wg sync.WaitGroup
	for c := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := &http.Client{Timeout: 30 * time.Second}
			for i := 0; time.Now().Before(end); i++ {
				before := start.Add(time.Duration(200+rand.IntN(800))*time.Minute).UnixMilli() + int64(rand.IntN(60000))
				path := fmt.Sprintf("/api/v1/tasks/t/history?limit=200&before=%d-%d", before, c)
				if i%2 == 1 {
					path = fmt.Sprintf("/tasks/t?limit=200&before=%d-%d", before, c)
				}
				res, err := cl.Get(hs.URL + path)
				code := 0
				if err == nil {
					_, _ = io.Copy(io.Discard, res.Body)
					res.Body.Close()
					code = res.StatusCode
				}
				n, _ := codes.LoadOrStore(code, new(atomic.Int64))
				n.(*atomic.Int64).Add(1)
			}
		}()
	}
	for time.Now().Before(end) {
		if r := rss(t); r > peak.Load() {
			peak.Store(r)
		}
		time.Sleep(100 * time.Millisecond)
	}
	wg.Wait()
	var answers []string
	codes.Range(func(k, v any) bool {
		answers = append(answers, fmt.Sprintf("%v: %d", k, v.(*atomic.Int64).Load()))
		return true
	})
	ts := sched.Stats().Task("tick")
	var runs uint64
	for i := range ts.Runs {
		runs += ts.Runs[i].Load()
	}
	t.Logf("32 clients for %v, history pages of 200 × 64 KiB entries with cursors of their own: RSS %.0f MB before, peak %.0f MB; answers %v; a 1 s task meanwhile: %d attempts, %d slots missed",
		dur, float64(base)/(1<<20), float64(peak.Load())/(1<<20), answers, runs, ts.Missed.Load())
}
