package observe

import (
	"bytes"
	"context"
	"sync"
	"time"

	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/scheduler"
)

// ViewTTL is how long the status endpoints reuse a fleet view: a page
// that refreshes, a dashboard and a curl loop share one read of the store
// per second, however many ask.
const ViewTTL = time.Second

// view is the status endpoints' fleet view, read at most once per ViewTTL:
// requests that arrive while it is being read wait for that read instead
// of starting their own. A view read for n slots per task serves every
// request for n or fewer.
type view struct {
	tasks func() []scheduler.Task // the scheduler's, as a reload leaves them
	store lock.Store
	hist  scheduler.History
	ttl   time.Duration

	mu  sync.Mutex
	cur *viewRead // the latest read, in flight or done; nil: none yet
}

// viewRead is one read of the fleet's view. rep and err are written before
// done is closed, and only read after.
type viewRead struct {
	n    int
	done chan struct{}
	at   time.Time // when it ended
	rep  StatusReport
	err  error

	mu    sync.Mutex
	pages map[int][]byte // the page of rep for n slots per task, once rendered
}

// get returns the view with n slots per task, at most ttl old.
func (v *view) get(ctx context.Context, n int) (StatusReport, error) {
	r, err := v.read(ctx, n)
	if err != nil {
		return StatusReport{}, err
	}
	return r.rep.first(n), r.err
}

// page returns the status page with n slots per task, at most ttl old,
// rendered once per view and n, and whether it reports an error.
func (v *view) page(ctx context.Context, n int, replica string) ([]byte, bool, error) {
	r, err := v.read(ctx, n)
	if err != nil {
		return nil, false, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if b, ok := r.pages[n]; ok {
		return b, r.err != nil, nil
	}
	p := Page{StatusReport: r.rep.first(n), Replica: replica}
	if r.err != nil {
		p.Error = r.err.Error()
		if p.Now.IsZero() {
			p.Now = r.at
		}
	}
	var b bytes.Buffer
	if err := WritePage(&b, p); err != nil {
		return nil, false, err
	}
	if r.pages == nil {
		r.pages = map[int][]byte{}
	}
	r.pages[n] = b.Bytes()
	return b.Bytes(), r.err != nil, nil
}

// read returns the latest read of the view if it has at least n slots per
// task and is at most ttl old, or makes one; it returns ctx's error if ctx
// ends first.
func (v *view) read(ctx context.Context, n int) (*viewRead, error) {
	// Reads are made for a multiple of DefaultSlots, so that requests
	// cycling through n cost a few reads a second, not one each.
	want := (n + DefaultSlots - 1) / DefaultSlots * DefaultSlots
	v.mu.Lock()
	r := v.cur
	if r == nil || r.n < want || r.stale(v.ttl) {
		r = &viewRead{n: want, done: make(chan struct{})}
		v.cur = r
		v.mu.Unlock()
		// The read does not end with the request that started it: others
		// wait for it.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pageTimeout)
		r.rep, r.err = Report(rctx, v.tasks(), v.store, v.hist, want)
		cancel()
		r.at = time.Now()
		close(r.done)
	} else {
		v.mu.Unlock()
	}
	select {
	case <-r.done:
		return r, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// stale reports whether r ended more than ttl ago.
func (r *viewRead) stale(ttl time.Duration) bool {
	select {
	case <-r.done:
		return time.Since(r.at) > ttl
	default:
		return false // in flight: join it
	}
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
