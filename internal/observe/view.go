package observe

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/scheduler"
)

// ViewTTL is how long the status endpoints reuse a fleet view: a page
// that refreshes, a dashboard and a curl loop share one read of the store
// per second, however many ask.
const ViewTTL = time.Second

// view is the fleet view of /api/v1/tasks, read at most once per ViewTTL
// (see shared). A view read for n slots per task serves every request for
// n or fewer.
type view struct {
	tasks func() []scheduler.Task
	store lock.Store
	hist  scheduler.History
	reads shared[StatusReport] // keyed by slots per task
}

// get returns the view with n slots per task, at most ViewTTL old.
func (v *view) get(ctx context.Context, n int) (StatusReport, error) {
	// Reads are made for a multiple of DefaultSlots, so that requests
	// cycling through n cost a few reads a second, not one each; a fresh
	// read for more slots serves too.
	roundUp := func(n int) int { return (n + DefaultSlots - 1) / DefaultSlots * DefaultSlots }
	read := roundUp(n)
	for more := roundUp(MaxSlots); more > read; more -= DefaultSlots {
		if v.reads.has(strconv.Itoa(more)) {
			read = more
			break
		}
	}
	rep, err := v.reads.get(ctx, strconv.Itoa(read), func(ctx context.Context) (StatusReport, error) {
		return Report(ctx, v.tasks(), v.store, v.hist, read)
	})
	return rep.first(n), err
}

// first returns rep with at most n slots per task, sharing rep's slots.
func (rep StatusReport) first(n int) StatusReport {
	out := StatusReport{Now: rep.Now, Tasks: make([]TaskStatus, len(rep.Tasks))}
	for i, t := range rep.Tasks {
		t.Slots = t.Slots[:min(n, len(t.Slots))]
		out.Tasks[i] = t
	}
	return out
}

// shared holds reads of one kind (the overview, a task's detail), one per
// key, each made at most once per ttl whoever asks: requests that arrive
// while a key is being read wait for that read instead of starting their
// own. Keys come from the configuration (a task's name, a bounded n), so
// the map is as small as the fleet; reads past ttl are dropped as new ones
// are made.
type shared[T any] struct {
	ttl time.Duration

	mu    sync.Mutex
	reads map[string]*sharedRead[T]
}

// sharedRead is one read; val and err are written before done is closed,
// and only read after.
type sharedRead[T any] struct {
	done chan struct{}
	at   time.Time // when it ended
	val  T
	err  error
}

// get returns the read of key at most s.ttl old, making it with load if
// there is none; it returns ctx's error if ctx ends first. load runs
// under pageTimeout, not ctx: others may wait for it.
func (s *shared[T]) get(ctx context.Context, key string, load func(context.Context) (T, error)) (T, error) {
	s.mu.Lock()
	r := s.reads[key]
	if r == nil || r.stale(s.ttl) {
		if s.reads == nil {
			s.reads = map[string]*sharedRead[T]{}
		}
		for k, old := range s.reads {
			if old.stale(s.ttl) {
				delete(s.reads, k)
			}
		}
		r = &sharedRead[T]{done: make(chan struct{})}
		s.reads[key] = r
		s.mu.Unlock()
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pageTimeout)
		r.val, r.err = load(rctx)
		cancel()
		r.at = time.Now()
		close(r.done)
	} else {
		s.mu.Unlock()
	}
	select {
	case <-r.done:
		return r.val, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

// has reports whether key has a read in flight or at most s.ttl old.
func (s *shared[T]) has(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.reads[key]
	return r != nil && !r.stale(s.ttl)
}

// stale reports whether r ended more than ttl ago.
func (r *sharedRead[T]) stale(ttl time.Duration) bool {
	select {
	case <-r.done:
		return time.Since(r.at) > ttl
	default:
		return false // in flight: join it
	}
}
