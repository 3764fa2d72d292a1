package observe_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/observe"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/memlock"
	"github.com/slotd/slotd/scheduler"
	"github.com/slotd/slotd/scheduler/history"
)

// pageStore is a Memory store that counts the slots and tasks whose
// keys a read asks for.
type pageStore struct {
	*memlock.Store
	mu           sync.Mutex
	slots, names int
}

func (s *pageStore) States(ctx context.Context, slots []lock.Slot) ([]lock.State, error) {
	s.mu.Lock()
	s.slots += len(slots)
	s.mu.Unlock()
	return s.Store.States(ctx, slots)
}

func (s *pageStore) Paused(ctx context.Context, tasks []string, renew bool) ([]bool, error) {
	s.mu.Lock()
	s.names += len(tasks)
	s.mu.Unlock()
	return s.Store.Paused(ctx, tasks, renew)
}

// pageHistory counts the entries asked of it.
type pageHistory struct {
	*history.Memory
	mu      sync.Mutex
	entries int
}

func (h *pageHistory) Recent(ctx context.Context, task string, n int) ([]scheduler.HistoryEntry, error) {
	h.mu.Lock()
	h.entries += n
	h.mu.Unlock()
	return h.Memory.Recent(ctx, task, n)
}

func (s *pageStore) take() (slots, names int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	slots, names, s.slots, s.names = s.slots, s.names, 0, 0
	return slots, names
}

// /api/v1/tasks reads the store for the page of tasks asked for, not the
// fleet: with 10,000 tasks, ?n=1 asks the store for the keys of one slot
// of each of the page's MaxPerPage tasks, and their pause states, and the
// history for as many entries as one slot of each can have; ?per=
// and ?page= select another page at the same cost, and say where they are.
func TestTasksAPIReadsOnlyItsPage(t *testing.T) {
	const fleet = 10_000
	st := &pageStore{Store: memlock.New(nil)}
	hist := &pageHistory{Memory: history.NewMemory(0)}
	tasks := make([]scheduler.Task, fleet)
	for i := range tasks {
		tasks[i] = statusTask(t, fmt.Sprintf("task-%05d", i), "@every 1m", 3, 48*time.Hour)
	}
	sched := scheduler.New(tasks, st, scheduler.WithReplica("r1"), scheduler.WithLogger(slog.New(slog.DiscardHandler)))
	h := observe.Handler(observe.Daemon{Scheduler: sched, Store: st, History: hist, Replica: "r1"})
	for _, c := range []struct {
		path        string
		tasks, page int
		first       string
		shared      bool // served by the read before, if within ViewTTL: not counted
	}{
		{"/api/v1/tasks?n=1", observe.MaxPerPage, 1, "task-00000", false},
		{"/api/v1/tasks?n=1&per=7&page=3", 7, 3, "task-00014", false},
		{"/api/v1/tasks?n=2&per=1&page=10000", 1, 10000, "task-09999", false},
		// Past the last page is the last page, whose read (of more
		// slots) serves it.
		{"/api/v1/tasks?n=1&per=1&page=999999", 1, 10000, "task-09999", true},
	} {
		hist.mu.Lock()
		hist.entries = 0
		hist.mu.Unlock()
		st.take()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, c.path, nil))
		var rep observe.StatusReport
		if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &rep) != nil {
			t.Fatalf("GET %s: %d\n%.500s", c.path, rec.Code, rec.Body.String())
		}
		slots, names := st.take()
		hist.mu.Lock()
		entries := hist.entries
		hist.mu.Unlock()
		// n=2 is read as DefaultSlots, so that requests cycling through n
		// share a read.
		n := 1
		if c.path == "/api/v1/tasks?n=2&per=1&page=10000" {
			n = observe.DefaultSlots
		}
		t.Logf("GET %s, %d tasks: %d slots' keys, %d pause states, %d history entries asked for", c.path, fleet, slots, names, entries)
		if !c.shared && (slots != c.tasks*n || names != c.tasks || entries != c.tasks*n*(3+1)) {
			t.Errorf("GET %s asked the store for %d slots and %d pause states, the history for %d entries; want %d, %d and %d",
				c.path, slots, names, entries, c.tasks*n, c.tasks, c.tasks*n*(3+1))
		}
		if len(rep.Tasks) != c.tasks || rep.Tasks[0].Name != c.first || rep.Total != fleet || rep.Page != c.page || rep.Pages != (fleet+c.tasks-1)/c.tasks {
			t.Errorf("GET %s: %d tasks from %s, total %d, page %d of %d; want %d from %s, page %d",
				c.path, len(rep.Tasks), rep.Tasks[0].Name, rep.Total, rep.Page, rep.Pages, c.tasks, c.first, c.page)
		}
	}
}
