package observe

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/scheduler"
	"github.com/slotd/slotd/scheduler/history"
)

// Bounds of a task's page and its endpoints.
const (
	// UpcomingFires is how many next fire times a task's detail lists.
	UpcomingFires = 5
	// DefaultAttempts is how many history entries a page of a task's
	// attempts holds unless asked (?limit=).
	DefaultAttempts = 20
	// MaxAttempts bounds ?limit= of a task's history.
	MaxAttempts = 200
	// MaxPageBytes bounds the entries' text a page of a task's history
	// holds (MaxAttempts entries of full output would be 13 MB): a page
	// that reaches it ends there, and its Next cursor goes on.
	MaxPageBytes = 1 << 20
)

// TaskDetail is one task as its page and GET /api/v1/tasks/{name} show it.
type TaskDetail struct {
	Now  time.Time  `json:"now"` // by the store's clock
	Task TaskStatus `json:"task"`
	// State is what the task's slots say of it, as on the overview.
	State string `json:"state"`
	// The task's policy, as configured.
	Lease   string `json:"lease"`
	DoneTTL string `json:"done_ttl"`
	Timeout string `json:"timeout"`
	Window  string `json:"window"` // how long after its fire time a slot may start
	Catchup string `json:"catchup"`
	// Concurrency is the task's policy while its previous slot runs:
	// allow, forbid, replace or queue.
	Concurrency string `json:"concurrency"`
	Upcoming    []Fire `json:"upcoming"` // the next UpcomingFires fire times
}

// Fire is one future fire time of a task and the id its slot will have.
type Fire struct {
	Time  time.Time `json:"time"`  // UTC
	Local time.Time `json:"local"` // the same instant in the task's time zone
	Slot  string    `json:"slot"`
}

// Detail reads task's detail at the store's time with n slots.
func Detail(ctx context.Context, task *scheduler.Task, store lock.Store, hist scheduler.History, n int) (TaskDetail, error) {
	rep, err := Report(ctx, []scheduler.Task{*task}, store, hist, n)
	if err != nil {
		return TaskDetail{Now: rep.Now}, err
	}
	d := TaskDetail{
		Now: rep.Now, Task: rep.Tasks[0], State: taskState(rep.Tasks[0]),
		Lease: task.Lease.String(), DoneTTL: task.DoneTTL.String(), Timeout: task.Timeout.String(),
		Window: task.Window().String(), Catchup: task.Catchup.String(),
		Concurrency: task.Concurrency.String(),
	}
	loc, err := time.LoadLocation(task.Timezone) // "" is UTC; validated at load
	if err != nil {
		loc = time.UTC
	}
	for at := rep.Now; len(d.Upcoming) < UpcomingFires; {
		next := task.Schedule.Next(at)
		if next.IsZero() || !next.After(at) {
			break
		}
		d.Upcoming = append(d.Upcoming, Fire{Time: next.UTC(), Local: next.In(loc), Slot: task.Schedule.SlotID(next)})
		at = next
	}
	return d, nil
}

// Attempts is one page of a task's history, newest first.
type Attempts struct {
	Task    string                   `json:"task"`
	Entries []scheduler.HistoryEntry `json:"entries"`
	// Next is the cursor of the following (older) page, to pass as
	// ?before=; "" on the last page.
	Next string `json:"next,omitempty"`
}

// HistoryPager is a History that can read a page of a task's entries
// older than a cursor (an entry's ID) without reading the newer ones;
// redislock.History is one. Other histories are paged by reading up to
// history.MaxLen entries and skipping.
type HistoryPager interface {
	// RecentBefore returns up to n of task's entries older than the entry
	// whose ID is before ("": the newest), newest first.
	RecentBefore(ctx context.Context, task, before string, n int) ([]scheduler.HistoryEntry, error)
}

// ErrBadCursor: a ?before= that is not a history entry's id.
var ErrBadCursor = errors.New("observe: the cursor is not a history id (<unix ms>-<seq>)")

// ReadAttempts reads the page of up to limit of task's attempts older
// than the cursor before ("": the newest), holding at most about
// MaxPageBytes of their text. It reads at most limit+1 entries from a
// HistoryPager (every history of slotd is one), and at most
// history.MaxLen from another history.
func ReadAttempts(ctx context.Context, hist scheduler.History, task, before string, limit int) (Attempts, error) {
	a := Attempts{Task: task, Entries: []scheduler.HistoryEntry{}}
	if before != "" {
		if _, _, ok := streamID(before); !ok {
			return a, fmt.Errorf("%w: %q", ErrBadCursor, before)
		}
	}
	if hist == nil || limit <= 0 {
		return a, nil
	}
	var es []scheduler.HistoryEntry
	var err error
	if p, ok := hist.(HistoryPager); ok {
		es, err = p.RecentBefore(ctx, task, before, limit+1)
	} else {
		n := limit + 1
		if before != "" {
			n = history.MaxLen
		}
		es, err = hist.Recent(ctx, task, n)
		if before != "" {
			i := 0
			for i < len(es) && !idBefore(es[i].ID, before) {
				i++
			}
			es = es[i:]
		}
	}
	if err != nil {
		return a, fmt.Errorf("attempts of task %s: %w", task, err)
	}
	size := 0
	for i := range es {
		size += entrySize(&es[i])
		if i > 0 && size > MaxPageBytes { // at least one entry, so that paging goes on
			limit = min(limit, i)
			break
		}
	}
	if len(es) > limit {
		es = es[:limit]
		a.Next = es[limit-1].ID
	}
	a.Entries = append(a.Entries, es...)
	return a, nil
}

// entrySize is about the bytes of e's text.
func entrySize(e *scheduler.HistoryEntry) int {
	const fixed = 256 // times, numbers, names of fields
	return fixed + len(e.ID) + len(e.Slot) + len(e.Replica) + len(e.Outcome) + len(e.Error) + len(e.Output)
}

// streamID parses a stream id, "<unix ms>-<seq>".
func streamID(id string) (ms, seq uint64, ok bool) {
	a, b, ok := strings.Cut(id, "-")
	if !ok {
		return 0, 0, false
	}
	ms, err1 := strconv.ParseUint(a, 10, 64)
	seq, err2 := strconv.ParseUint(b, 10, 64)
	return ms, seq, err1 == nil && err2 == nil
}

// idBefore reports whether stream id a is older than b; an id that does
// not parse is older than any.
func idBefore(a, b string) bool {
	am, as, aok := streamID(a)
	bm, bs, bok := streamID(b)
	if !aok || !bok {
		return !aok
	}
	return am < bm || am == bm && as < bs
}
