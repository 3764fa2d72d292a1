package observe_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/observe"
	"github.com/slotd/slotd/lock/memlock"
	"github.com/slotd/slotd/scheduler"
	"github.com/slotd/slotd/scheduler/history"
)

// gatedHistory is a history whose first hold page reads in flight wait
// until release is closed (those beyond pass at once, so that a missing
// cap fails the test instead of hanging it), counting the reads in
// flight and the most seen at once.
type gatedHistory struct {
	*history.Memory
	hold    int
	entered chan struct{} // one send per read that waits
	release chan struct{}

	mu       sync.Mutex
	inFlight int
	most     int
}

func (h *gatedHistory) RecentBefore(ctx context.Context, task, before string, n int) ([]scheduler.HistoryEntry, error) {
	h.mu.Lock()
	h.inFlight++
	h.most = max(h.most, h.inFlight)
	wait := h.inFlight <= h.hold
	h.mu.Unlock()
	if wait {
		h.entered <- struct{}{}
		<-h.release
	}
	h.mu.Lock()
	h.inFlight--
	h.mu.Unlock()
	return h.Memory.RecentBefore(ctx, task, before, n)
}

// A flood of history pages, each with a cursor of its own so that no two
// share a read, reads the store at most observe.MaxReads at a time: the
// requests beyond find every place taken and are answered 503 with
// Retry-After at once, while the reads in flight are still blocked (no
// queue, no timing). Once those end, a new request is served again.
func TestReadFloodIsCapped(t *testing.T) {
	hist := &gatedHistory{Memory: history.NewMemory(0), hold: observe.MaxReads,
		entered: make(chan struct{}), release: make(chan struct{})}
	task := statusTask(t, "report", "@every 1h", 3, 48*time.Hour)
	st := memlock.New(nil)
	sched := scheduler.New([]scheduler.Task{task}, st, scheduler.WithReplica("r1"), scheduler.WithLogger(slog.New(slog.DiscardHandler)))
	h := observe.Handler(observe.Daemon{Scheduler: sched, Store: st, History: hist, Replica: "r1"})

	get := func(i int) *http.Response {
		path := fmt.Sprintf("/api/v1/tasks/report/history?before=%d-0", 1700000000000+i)
		if i%2 == 1 {
			path = fmt.Sprintf("/tasks/report?before=%d-0", 1700000000000+i)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Result()
	}
	// The task page reads its detail first (no history page read, no
	// gate held after), then its attempts: every request below that gets
	// a place blocks in RecentBefore.
	var wg sync.WaitGroup
	held := make([]*http.Response, observe.MaxReads)
	for i := range observe.MaxReads {
		wg.Add(1)
		go func() { defer wg.Done(); held[i] = get(i) }()
		<-hist.entered
	}
	const flood = 50
	for i := range flood {
		res := get(observe.MaxReads + i)
		if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") != "1" {
			t.Fatalf("request %d of the flood, %d reads in flight: %d, Retry-After %q; want 503 and Retry-After 1",
				i, observe.MaxReads, res.StatusCode, res.Header.Get("Retry-After"))
		}
	}
	close(hist.release)
	wg.Wait()
	for i, res := range held {
		if res.StatusCode != http.StatusOK {
			t.Errorf("request %d, which had a place: %d, want 200", i, res.StatusCode)
		}
	}
	go func() {
		for range hist.entered { // reads after the release pass through
		}
	}()
	defer close(hist.entered)
	if res := get(1000); res.StatusCode != http.StatusOK {
		t.Errorf("a request once the flood's reads ended: %d, want 200", res.StatusCode)
	}
	hist.mu.Lock()
	defer hist.mu.Unlock()
	if hist.most != observe.MaxReads {
		t.Errorf("at most %d history reads were in flight at once, want observe.MaxReads = %d", hist.most, observe.MaxReads)
	}
}
