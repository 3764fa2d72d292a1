package observe_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
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
)

// costFleet is a daemon's handler over a real redis-server holding 200
// tasks of a minute each, every one with a full history.
type costFleet struct {
	rdb *redis.Client
	h   http.Handler
}

const costTasks = 200

func newCostFleet(t *testing.T) *costFleet {
	t.Helper()
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	var tasks []scheduler.Task
	p := rdb.Pipeline()
	now := time.Now().UTC()
	for i := range costTasks {
		name := fmt.Sprintf("task-%03d", i)
		tasks = append(tasks, statusTask(t, name, "@every 1m", 3, 48*time.Hour))
		// history.MaxLen-ish: a busy task's stream; under -race, whose
		// decoding of 40,000 entries can outlast the 5 s page timeout on a
		// loaded machine, 50 (the command counts are the same).
		for k := range map[bool]int{false: 400, true: 50}[raceDetector] {
			at := now.Add(-time.Duration(k) * time.Minute).Truncate(time.Minute)
			p.XAdd(ctx, &redis.XAddArgs{Stream: redislock.HistoryKey("slotd", name), Values: []string{
				"slot", at.Format("200601021504"), "slot_time", at.Format(time.RFC3339), "attempt", "1",
				"token", strconv.FormatInt(lock.Token(at, 1), 10), "replica", "r1", "outcome", "success",
				"started", at.Format(time.RFC3339Nano), "duration_ms", "1200", "error", "",
			}})
		}
		// A task's 400 at a time: one pipeline of all 80,000 outlasts
		// the client's 3 s write timeout under -race on a loaded machine.
		if _, err := p.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	st := redislock.New(rdb, "slotd")
	hist := redislock.NewHistory(rdb, "slotd", time.Hour)
	t.Cleanup(hist.Close)
	sched := scheduler.New(tasks, st, scheduler.WithReplica("r1"), scheduler.WithLogger(slog.New(slog.DiscardHandler)))
	return &costFleet{rdb: rdb, h: observe.Handler(observe.Daemon{Scheduler: sched, Store: st, History: hist, Replica: "r1"})}
}

// commands returns the commands Redis ran since the last call, as INFO
// commandstats counts them (INFO, CONFIG and HELLO left out).
func (f *costFleet) commands(t *testing.T) int {
	t.Helper()
	ctx := context.Background()
	info, err := f.rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok || strings.HasPrefix(name, "cmdstat_info") || strings.HasPrefix(name, "cmdstat_config") || name == "cmdstat_hello" {
			continue // the test's own, and new connections' handshakes
		}
		calls, _, _ := strings.Cut(rest, ",")
		c, _ := strconv.Atoi(calls)
		n += c
	}
	return n
}

// request serves one GET of path and returns its status code and the bytes
// the process allocated meanwhile (the response is counted, not kept).
func (f *costFleet) request(path string) (int, uint64) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	w := &countingWriter{h: http.Header{}, code: http.StatusOK}
	f.h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
	runtime.ReadMemStats(&after)
	return w.code, after.TotalAlloc - before.TotalAlloc
}

// requestBody is request, keeping the response's body.
func (f *costFleet) requestBody(path string) (int, uint64, string) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	w := &countingWriter{h: http.Header{}, code: http.StatusOK, keep: true}
	f.h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
	runtime.ReadMemStats(&after)
	return w.code, after.TotalAlloc - before.TotalAlloc, w.body.String()
}

// countingWriter is a ResponseWriter that keeps only the status code and
// the body's size, or the body if keep.
type countingWriter struct {
	h    http.Header
	code int
	n    int
	keep bool
	body strings.Builder
}

func (w *countingWriter) Header() http.Header  { return w.h }
func (w *countingWriter) WriteHeader(code int) { w.code = code }
func (w *countingWriter) Write(b []byte) (int, error) {
	w.n += len(b)
	if w.keep {
		w.body.Write(b)
	}
	return len(b), nil
}

// The status API of 200 tasks asked for 200 slots each costs a bounded
// number of Redis commands and bytes (n is capped at MaxSlots), a second
// request within ViewTTL costs Redis nothing, and 8 clients looping on it
// are all served. (The page is an overview now: TestOverviewCost.)
func TestStatusPageCost(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	// Under -race (as CI runs) the command counts still hold; the
	// allocation bound and the 8 loops measure the race runtime instead,
	// and are left out.
	f := newCostFleet(t)
	f.commands(t)
	start := time.Now()
	code, bytes := f.request("/api/v1/tasks?n=200")
	cmds := f.commands(t)
	t.Logf("GET /api/v1/tasks?n=200, %d tasks: %d Redis commands, %.1f MB allocated", costTasks, cmds, float64(bytes)/(1<<20))
	if code != http.StatusOK {
		t.Fatalf("GET /api/v1/tasks?n=200: %d", code)
	}
	// TIME, the fleet's first start, one pipeline of 3 reads per slot, one
	// history read per task (EVALSHA of history_read.lua and its
	// XREVRANGE; the script's SCRIPT LOAD once), and one pipelined GET per
	// task of its pause state and ZRANGE of its triggers (its run-now
	// slots are among its latest).
	if want := 3 + costTasks*(3*observe.MaxSlots+4); cmds > want {
		t.Errorf("GET /api/v1/tasks?n=200 cost %d Redis commands, want at most %d", cmds, want)
	}
	// Before the cap: 275 MB (120,202 commands) for the page of old; the
	// JSON of 10,000 slots costs most of what is left.
	if !raceDetector && bytes > 128<<20 {
		t.Errorf("GET /api/v1/tasks?n=200 allocated %d bytes, want at most 128 MiB", bytes)
	}
	within := time.Since(start) < observe.ViewTTL // the view was read after start
	if code, _ := f.request("/api/v1/tasks?n=7"); code != http.StatusOK {
		t.Fatalf("GET /api/v1/tasks: %d", code)
	}
	if cmds := f.commands(t); cmds != 0 && within {
		t.Errorf("a second request within ViewTTL cost %d Redis commands, want 0", cmds)
	} else if !within {
		t.Logf("the first request took longer than ViewTTL: the sharing of a view is not checked")
	}

	if raceDetector {
		return
	}
	// 8 loops for 2 s: every request is served, and Redis reads the view
	// about once per ViewTTL.
	time.Sleep(observe.ViewTTL)
	f.commands(t)
	var ok, failed atomic.Int64
	var wg sync.WaitGroup
	end := time.Now().Add(2 * time.Second)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				if code, _ := f.request("/api/v1/tasks?n=200"); code == http.StatusOK {
					ok.Add(1)
				} else {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	cmds = f.commands(t)
	t.Logf("8 loops for 2s: %d pages served, %d failed, %d Redis commands", ok.Load(), failed.Load(), cmds)
	if failed.Load() > 0 || ok.Load() < 8 {
		t.Errorf("8 loops for 2s: %d served, %d failed", ok.Load(), failed.Load())
	}
	if per := 1 + costTasks*(3*observe.MaxSlots+2); cmds > 4*per {
		t.Errorf("8 loops for 2s cost %d Redis commands: more than 4 reads of the view (%d each)", cmds, per)
	}
}
