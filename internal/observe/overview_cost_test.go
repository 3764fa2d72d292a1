package observe_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/internal/observe"
	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/memlock"
	"github.com/slotd/slotd/lock/redislock"
	"github.com/slotd/slotd/scheduler"
	"github.com/slotd/slotd/scheduler/history"
)

// bigFleet is the number of tasks of the overview's cost test: 10,000,
// and a quarter of that under the race detector, which checks the
// concurrency, not the scale, and is slow.
var bigFleet = map[bool]int{false: 10_000, true: 2_500}[raceDetector]

// seedBigFleet makes bigFleet hourly tasks on st and hist as a fleet in
// service has them: 1 in 100 exhausted its previous slot (three failed
// attempts, errors with markup), 1 in 100 retries its open slot, 1 in 100
// runs it, and the rest completed their previous slot. It returns the
// tasks and how many are in each of those states.
func seedBigFleet(t *testing.T, st lock.Store, hist scheduler.History) ([]scheduler.Task, map[string]int) {
	t.Helper()
	ctx := context.Background()
	now, err := st.Time(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tasks := make([]scheduler.Task, bigFleet)
	for i := range tasks {
		tasks[i] = statusTask(t, fmt.Sprintf("task-%05d", i), "@every 1h", 3, 48*time.Hour)
		tasks[i].Deadline = 4 * time.Hour // the slots seeded stay claimable
		tasks[i].Lease = time.Hour        // and running ones keep running
	}
	kind := func(i int) string {
		switch i % 100 {
		case 0:
			return observe.PhaseExhausted
		case 1:
			return observe.PhaseRetrying
		case 2:
			return observe.PhaseRunning
		}
		return observe.PhaseDone
	}
	want := map[string]int{}
	for i := range tasks {
		want[kind(i)]++
	}
	for round := 1; round <= 3; round++ {
		var idx []int
		var reqs []lock.ClaimRequest
		for i := range tasks {
			if round > 1 && kind(i) != observe.PhaseExhausted {
				continue
			}
			task := &tasks[i]
			at, _ := task.Schedule.Latest(now)
			if kind(i) == observe.PhaseExhausted || kind(i) == observe.PhaseDone {
				at = at.Add(-time.Hour)
			}
			idx = append(idx, i)
			reqs = append(reqs, lock.ClaimRequest{Slot: task.Slot(at), Owner: "r1", Policy: task.Policy})
		}
		type won struct {
			i     int
			slot  lock.Slot
			owner lock.Owner
		}
		var wins []won
		lock.ClaimMany(ctx, st, reqs, func(k int, r lock.ClaimReply) {
			if r.Err != nil || r.Result != lock.Won {
				t.Fatalf("claim %s: %+v %v", reqs[k].Slot, r.Claim, r.Err)
			}
			wins = append(wins, won{idx[k], reqs[k].Slot, lock.Owner{ID: "r1", Attempt: r.Attempt}})
		})
		work := make(chan won)
		var wg sync.WaitGroup
		for range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for w := range work {
					task := &tasks[w.i]
					e := scheduler.HistoryEntry{Slot: w.slot.ID, SlotTime: w.slot.Time, Attempt: w.owner.Attempt,
						Token: lock.Token(w.slot.Time, w.owner.Attempt), Replica: "r1", Started: now, Duration: time.Second}
					var err error
					switch kind(w.i) {
					case observe.PhaseRunning:
						continue
					case observe.PhaseDone:
						err, e.Outcome = st.Complete(ctx, w.slot, w.owner, task.DoneTTL), "success"
					default:
						err, e.Outcome = st.Release(ctx, w.slot, w.owner), "failure"
						e.Error = `exit status 1: <img src=x onerror=alert(1)> "quoted" & ` + strings.Repeat("é", 300)
					}
					if err == nil {
						err = hist.Append(ctx, task.Name, e)
					}
					if err != nil {
						t.Error(err)
					}
				}
			}()
		}
		for _, w := range wins {
			work <- w
		}
		close(work)
		wg.Wait()
	}
	return tasks, want
}

// With 10,000 tasks (bigFleet) the overview's every page is under 1 MB, on the
// embedded store and on a real redis-server; on Redis one read of it costs
// TIME, the fleet's first start, three reads per slot of OverviewSlots
// slots per task in one pipeline, and one XREVRANGE per task only for the
// tasks whose slots do not tell everything (here the failing and
// retrying ones); a second request within ViewTTL costs nothing, and a
// task's page costs a few dozen commands. Times are logged, not asserted
// (docs/performance.md has them).
func TestOverviewCost(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 tasks")
	}
	t.Run("memory", func(t *testing.T) {
		st, hist := memlock.New(nil), history.NewMemory(0)
		tasks, want := seedBigFleet(t, st, hist)
		f := &costFleet{h: bigHandler(tasks, st, hist)}
		checkOverview(t, f, want)
	})
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { rdb.Close() })
		st := redislock.New(rdb, "slotd")
		t.Cleanup(func() { st.Close() })
		hist := redislock.NewHistory(rdb, "slotd", time.Hour)
		t.Cleanup(hist.Close)
		tasks, want := seedBigFleet(t, st, hist)
		f := &costFleet{rdb: rdb, h: bigHandler(tasks, st, hist)}
		checkOverview(t, f, want)
	})
	// The worst case: no slot tells everything (here every one was
	// missed), so every task's history is read too, in a few pipelines.
	t.Run("redis-all-missed", func(t *testing.T) {
		srv := redistest.Start(t)
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { rdb.Close() })
		st := redislock.New(rdb, "slotd")
		t.Cleanup(func() { st.Close() })
		hist := redislock.NewHistory(rdb, "slotd", time.Hour)
		t.Cleanup(hist.Close)
		tasks := make([]scheduler.Task, bigFleet)
		for i := range tasks {
			tasks[i] = statusTask(t, fmt.Sprintf("task-%05d", i), "@every 1h", 3, 48*time.Hour)
		}
		f := &costFleet{rdb: rdb, h: bigHandler(tasks, st, hist)}
		f.commands(t)
		start := time.Now()
		code, _, body := f.requestBody("/")
		took := time.Since(start)
		cmds := f.commands(t)
		t.Logf("GET /, %d tasks all missed: %d bytes, %d Redis commands, %v", bigFleet, len(body), cmds, took.Round(time.Millisecond))
		// TIME, first start, 3 reads per slot and the pause state and the
		// triggers per task, one history read per task (all are unsettled):
		// EVALSHA of history_read.lua and its XREVRANGE; the script's SCRIPT
		// LOAD once.
		if max := 3 + bigFleet*(3*observe.OverviewSlots+4); code != http.StatusOK || len(body) > 1<<20 || cmds > max {
			t.Errorf("GET /: %d, %d bytes, %d Redis commands (at most %d)", code, len(body), cmds, max)
		}
		if !strings.Contains(body, fmt.Sprintf(`data-state="missed" data-count="%d"`, bigFleet)) {
			t.Errorf("the overview does not count every task missed")
		}
	})
}

func bigHandler(tasks []scheduler.Task, st lock.Store, hist scheduler.History) http.Handler {
	sched := scheduler.New(tasks, st, scheduler.WithReplica("r1"), scheduler.WithLogger(slog.New(slog.DiscardHandler)))
	return observe.Handler(observe.Daemon{Scheduler: sched, Store: st, History: hist, Replica: "r1"})
}

// checkOverview requests the overview's pages and a task's page from f,
// whose fleet holds want tasks in each state.
func checkOverview(t *testing.T, f *costFleet, want map[string]int) {
	const limit = 1 << 20
	if f.rdb != nil {
		f.commands(t)
	}
	start := time.Now()
	code, alloc, body := f.requestBody("/")
	took := time.Since(start)
	var cmds int
	if f.rdb != nil {
		cmds = f.commands(t)
	}
	t.Logf("GET /, %d tasks: %d bytes, %.1f MB allocated, %d Redis commands, %v (read and render)",
		bigFleet, len(body), float64(alloc)/(1<<20), cmds, took.Round(time.Millisecond))
	if code != http.StatusOK || len(body) > limit {
		t.Fatalf("GET /: %d, %d bytes (limit %d)", code, len(body), limit)
	}
	for state, n := range want {
		if !strings.Contains(body, fmt.Sprintf(`data-state="%s" data-count="%d"`, state, n)) {
			t.Errorf("the overview does not count %d tasks %s", n, state)
		}
	}
	if strings.Contains(body, "<img") {
		t.Errorf("the overview shows a task's error unescaped")
	}
	unsettled := want[observe.PhaseExhausted] + want[observe.PhaseRetrying]
	// A history read is two commands: EVALSHA and its XREVRANGE; the
	// script's SCRIPT LOAD is one more, once. The triggers are one ZRANGE
	// per task.
	if max := 3 + bigFleet*(3*observe.OverviewSlots+2) + 2*unsettled; f.rdb != nil && cmds > max {
		t.Errorf("GET / cost %d Redis commands, want at most %d", cmds, max)
	}

	within := time.Since(start) < observe.ViewTTL
	rank := map[string]int{observe.PhaseExhausted: 0, observe.PhaseRetrying: 1, observe.PhaseRunning: 2, observe.PhaseDone: 3}
	rowState := regexp.MustCompile(`<tr class="task[^"]*" data-task="[^"]*" data-state="([a-z]+)">`)
	mid := fmt.Sprintf("/?state=done&page=%d&per=200", bigFleet/400)
	for _, path := range []string{"/?per=200", "/?state=failing&per=200", "/?q=task-0&page=3", mid} {
		start := time.Now()
		code, _, body := f.requestBody(path)
		t.Logf("GET %s: %d bytes, %v", path, len(body), time.Since(start).Round(time.Millisecond))
		rows := rowState.FindAllStringSubmatch(body, -1)
		if code != http.StatusOK || len(body) > limit || len(rows) == 0 {
			t.Errorf("GET %s: %d, %d bytes (limit %d), %d rows", path, code, len(body), limit, len(rows))
		}
		for i := 1; i < len(rows) && path == "/?per=200"; i++ {
			if rank[rows[i][1]] < rank[rows[i-1][1]] {
				t.Errorf("GET %s lists a %s task after a %s one: not exhausted, retrying, running, done", path, rows[i][1], rows[i-1][1])
				break
			}
		}
	}
	if f.rdb != nil {
		if cmds := f.commands(t); within && cmds != 0 {
			t.Errorf("pages of the overview within ViewTTL cost %d Redis commands, want 0", cmds)
		}
	}

	start = time.Now()
	code, _, body = f.requestBody("/tasks/task-00000")
	t.Logf("GET /tasks/task-00000: %d bytes, %v", len(body), time.Since(start).Round(time.Millisecond))
	if code != http.StatusOK || !strings.Contains(body, `data-state="exhausted"`) || strings.Contains(body, "<img") {
		t.Errorf("GET /tasks/task-00000: %d\n%s", code, body)
	}
	if f.rdb != nil {
		// TIME, first start, 3 reads per slot, the slots' history and a
		// page of attempts (EVALSHA and XREVRANGE each), the pause state,
		// the triggers.
		if cmds, max := f.commands(t), 2+3*observe.DefaultSlots+6; cmds > max {
			t.Errorf("GET /tasks/task-00000 cost %d Redis commands, want at most %d", cmds, max)
		}
	}
}
