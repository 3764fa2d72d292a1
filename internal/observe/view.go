package observe

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/scheduler"
)

// ViewTTL is how long the status endpoints reuse a fleet view: a page
// that refreshes, a dashboard and a curl loop share one read of the store
// per second, however many ask.
const ViewTTL = time.Second

// view is the fleet view of /api/v1/tasks, a page of tasks at a time,
// each page read at most once per ViewTTL (see shared). A page read for n
// slots per task serves every request of that page for n or fewer.
type view struct {
	tasks func() []scheduler.Task
	store lock.Store
	hist  scheduler.History
	reads shared[StatusReport] // keyed by slots per task and the page
}

// get returns page (1-based) of per tasks, with n slots per task, at most
// ViewTTL old: the store reads only that page's tasks' keys, so a request
// costs per × n slots however large the fleet.
func (v *view) get(ctx context.Context, n, page, per int) (StatusReport, error) {
	// Reads are made for 1 slot or a multiple of DefaultSlots, so that
	// requests cycling through n cost a few reads a second, not one each;
	// a fresh read for more slots serves too.
	roundUp := func(n int) int {
		if n <= 1 {
			return 1
		}
		return (n + DefaultSlots - 1) / DefaultSlots * DefaultSlots
	}
	tasks := v.tasks()
	pages := max(1, (len(tasks)+per-1)/per)
	page = min(max(page, 1), pages)
	key := func(read int) string { return fmt.Sprintf("%d/%d/%d", read, page, per) }
	read := roundUp(n)
	for more := roundUp(MaxSlots); more > read; more = roundUp(more - DefaultSlots) {
		if v.reads.has(key(more)) {
			read = more
			break
		}
	}
	rep, err := v.reads.get(ctx, key(read), func(ctx context.Context) (StatusReport, error) {
		from := (page - 1) * per
		rep, err := Report(ctx, tasks[min(from, len(tasks)):min(from+per, len(tasks))], v.store, v.hist, read)
		rep.Total, rep.Page, rep.Pages = len(tasks), page, pages
		return rep, err
	})
	return rep.first(n), err
}

// first returns rep with at most n slots per task, sharing rep's slots.
func (rep StatusReport) first(n int) StatusReport {
	out := rep
	out.Tasks = make([]TaskStatus, len(rep.Tasks))
	for i, t := range rep.Tasks {
		t.Slots = t.Slots[:min(n, len(t.Slots))]
		out.Tasks[i] = t
	}
	return out
}

// shared holds reads of one kind (the overview, a task's detail), one per
// key, each made at most once per ttl whoever asks: requests that arrive
// while a key is being read wait for that read instead of starting their
// own. Some keys come from the client (a history cursor), so what a
// shared holds is bounded, not the keys: a new read needs a place in
// gate (at most MaxReads reads of the store in flight across every
// shared of a server; a request that finds none gets ErrBusy at once,
// never a queue), and at most maxKept ended reads are kept for reuse,
// the oldest dropped first.
type shared[T any] struct {
	ttl  time.Duration
	gate readGate

	mu    sync.Mutex
	reads map[string]*sharedRead[T]
}

// MaxReads bounds the reads of the store that the status endpoints make
// at once, however many clients ask: each costs up to a page's worth of
// memory (maxPageBytes of history, or MaxPerPage tasks' slots), and
// replicas need the store and the CPU for their slots.
const MaxReads = 4

// maxKept bounds the ended reads a shared keeps for reuse within its ttl.
const maxKept = 16

// ErrBusy: every place for a read of the store is taken (see MaxReads);
// the client should retry in a second (the responses say Retry-After).
var ErrBusy = errors.New("observe: too many reads of the store in flight; retry in a second")

// readGate is the places for reads in flight: a send takes one, a receive
// gives it back.
type readGate chan struct{}

func newReadGate() readGate { return make(readGate, MaxReads) }

// sharedRead is one read; val and err are written before done is closed,
// and only read after.
type sharedRead[T any] struct {
	done chan struct{}
	at   time.Time // when it ended
	val  T
	err  error
}

// get returns the read of key at most s.ttl old, making it with load if
// there is none and s.gate has a place (ErrBusy if not); it returns ctx's
// error if ctx ends first. load runs under pageTimeout, not ctx: others
// may wait for it.
func (s *shared[T]) get(ctx context.Context, key string, load func(context.Context) (T, error)) (T, error) {
	var zero T
	s.mu.Lock()
	r := s.reads[key]
	if r == nil || r.stale(s.ttl) {
		select {
		case s.gate <- struct{}{}:
		default:
			s.mu.Unlock()
			return zero, ErrBusy
		}
		if s.reads == nil {
			s.reads = map[string]*sharedRead[T]{}
		}
		s.forget()
		r = &sharedRead[T]{done: make(chan struct{})}
		s.reads[key] = r
		s.mu.Unlock()
		func() {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pageTimeout)
			defer func() { // even if load panics: a place lost is lost for good
				cancel()
				r.at = time.Now()
				close(r.done)
				<-s.gate
			}()
			r.val, r.err = load(rctx)
		}()
	} else {
		s.mu.Unlock()
	}
	select {
	case <-r.done:
		return r.val, r.err
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

// forget drops the stale reads, and the oldest ended ones beyond
// maxKept-1 (making room for one more); s.mu is held.
func (s *shared[T]) forget() {
	ended := 0
	for k, old := range s.reads {
		switch {
		case old.stale(s.ttl):
			delete(s.reads, k)
		case old.ended():
			ended++
		}
	}
	for ; ended >= maxKept; ended-- {
		oldest := ""
		for k, r := range s.reads {
			if r.ended() && (oldest == "" || r.at.Before(s.reads[oldest].at)) {
				oldest = k
			}
		}
		delete(s.reads, oldest)
	}
}

// has reports whether key has a read in flight or at most s.ttl old.
func (s *shared[T]) has(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.reads[key]
	return r != nil && !r.stale(s.ttl)
}

// ended reports whether r's read is over.
func (r *sharedRead[T]) ended() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
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
