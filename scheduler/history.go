package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/slotd/slotd/internal/stats"
	"github.com/slotd/slotd/tasks"
)

// Run history: one entry per finished attempt, kept per task, newest last.
// It is what `slotd history`, `slotd status` and the status page show for
// "how long, where, and why not". It is a record, not part of the slot
// protocol: an entry that cannot be written is logged and the slot goes on.
const (
	// HistoryMaxLen is about how many entries a task's history keeps; Redis
	// trims the stream lazily (MAXLEN ~), so it may hold a few more.
	HistoryMaxLen = 1000
	// MaxHistoryError bounds the error text of an entry, in bytes.
	MaxHistoryError = 1024
	// MaxHistoryOutput bounds the output of an entry, in bytes (its
	// tail is kept), whatever a task's OutputTail.
	MaxHistoryOutput = tasks.MaxOutputTail

	// historyTimeout bounds one append: history must never hold a slot up.
	historyTimeout = 2 * time.Second
)

// HistoryEntry is one finished attempt of one slot.
type HistoryEntry struct {
	ID       string        `json:"id"` // assigned by Append; a Redis stream id, "<unix ms>-<seq>"
	Slot     string        `json:"slot"`
	SlotTime time.Time     `json:"slot_time"`
	Attempt  int           `json:"attempt"`
	Token    int64         `json:"token"`
	Replica  string        `json:"replica"`
	Outcome  stats.Outcome `json:"outcome"` // success, failure, timeout, lease_lost, canceled or success_unmarked (as slotd_runs_total)
	Started  time.Time     `json:"started"`
	Duration time.Duration `json:"-"`               // written as duration_ms
	Error    string        `json:"error,omitempty"` // at most MaxHistoryError bytes of valid UTF-8
	// Output is the tail of what the attempt printed or returned (see
	// tasks.Output): at most the task's OutputTail bytes, never more than
	// MaxHistoryOutput, of valid UTF-8. It is the task's own, so it is
	// attacker-controlled text: escape it wherever it is shown.
	Output string `json:"output,omitempty"`
	// Backfilled: an operator's backfill started the slot (slotd backfill).
	Backfilled bool `json:"backfilled,omitempty"`
}

// historyJSON is HistoryEntry as JSON: the duration in milliseconds.
type historyJSON struct {
	plainEntry
	DurationMS int64 `json:"duration_ms"`
}

type plainEntry HistoryEntry // without the JSON methods

// MarshalJSON writes the duration as duration_ms.
func (e HistoryEntry) MarshalJSON() ([]byte, error) {
	return json.Marshal(historyJSON{plainEntry(e), e.Duration.Milliseconds()})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (e *HistoryEntry) UnmarshalJSON(b []byte) error {
	var j historyJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*e = HistoryEntry(j.plainEntry)
	e.Duration = time.Duration(j.DurationMS) * time.Millisecond
	return nil
}

// History is where attempts are recorded. MemoryHistory implements it, and
// so do the Redis histories of internal/store.
type History interface {
	// Append records e as task's newest entry.
	Append(ctx context.Context, task string, e HistoryEntry) error
	// Recent returns up to n of task's entries, newest first.
	Recent(ctx context.Context, task string, n int) ([]HistoryEntry, error)
}

// TruncateHistoryError makes s valid UTF-8 of at most MaxHistoryError
// bytes, marking a cut with "…": how every History stores an entry's
// Error.
func TruncateHistoryError(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= MaxHistoryError {
		return s
	}
	const mark = "…"
	cut := MaxHistoryError - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}

// TruncateHistoryOutput makes s valid UTF-8 of at most MaxHistoryOutput
// bytes, keeping its tail and marking a cut with "…": how every History
// stores an entry's Output.
func TruncateHistoryOutput(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= MaxHistoryOutput {
		return s
	}
	const mark = "…"
	cut := len(s) - (MaxHistoryOutput - len(mark))
	for cut < len(s) && !utf8.RuneStart(s[cut]) {
		cut++
	}
	return mark + s[cut:]
}

// CutMark is what an entry read back with a part cut off says first in
// its Error: the store's key and the entry, and what was cut (cut). Only
// an entry slotd did not write can be cut on read: its own are within
// MaxHistoryError and MaxHistoryOutput.
func CutMark(key, id, cut string) string {
	return fmt.Sprintf("[history entry %s of %s cut on read: %s] ", id, key, cut)
}

// MemoryHistory keeps each task's latest entries in this process: the
// history of the embedded store, and of tests.
type MemoryHistory struct {
	max int

	mu   sync.Mutex
	m    map[string][]HistoryEntry // oldest first
	last int64                     // the last id's milliseconds
	seq  int64                     // and its sequence number
}

// NewMemoryHistory returns an empty history that keeps the latest max
// entries per task (HistoryMaxLen if max <= 0).
func NewMemoryHistory(max int) *MemoryHistory {
	if max <= 0 {
		max = HistoryMaxLen
	}
	return &MemoryHistory{max: max, m: map[string][]HistoryEntry{}}
}

// Append implements History. Ids are "<unix ms>-<seq>" and increase, as a
// stream's do.
func (h *MemoryHistory) Append(ctx context.Context, task string, e HistoryEntry) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("history: append %s slot %s attempt %d: %w", task, e.Slot, e.Attempt, err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if ms := time.Now().UnixMilli(); ms > h.last {
		h.last, h.seq = ms, 0
	} else {
		h.seq++
	}
	e.ID = strconv.FormatInt(h.last, 10) + "-" + strconv.FormatInt(h.seq, 10)
	e.Error = TruncateHistoryError(e.Error)
	e.Output = TruncateHistoryOutput(e.Output)
	list := append(h.m[task], e)
	if len(list) >= 2*h.max { // trim in batches, as Redis does, not on every append
		list = append(list[:0:0], list[len(list)-h.max:]...)
	}
	h.m[task] = list
	return nil
}

// Recent implements History.
func (h *MemoryHistory) Recent(ctx context.Context, task string, n int) ([]HistoryEntry, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("history: read %s: %w", task, err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	list := h.m[task]
	if len(list) > h.max {
		list = list[len(list)-h.max:]
	}
	out := make([]HistoryEntry, 0, min(max(n, 0), len(list)))
	for i := len(list) - 1; i >= 0 && len(out) < n; i-- {
		out = append(out, list[i])
	}
	return out, nil
}

// RecentBefore returns up to n of task's entries older than the entry
// whose id is before ("": the newest), newest first, without copying the
// newer ones: a page costs n entries however deep it is. Entries are
// bounded at Append (TruncateHistoryError, TruncateHistoryOutput), so a
// page holds at most n of those.
func (h *MemoryHistory) RecentBefore(ctx context.Context, task, before string, n int) ([]HistoryEntry, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("history: read %s before %s: %w", task, before, err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	list := h.m[task]
	if len(list) > h.max {
		list = list[len(list)-h.max:]
	}
	if before != "" {
		ms, seq, ok := parseHistoryID(before)
		if !ok {
			return nil, fmt.Errorf("history: read %s: cursor %q is not an id (<unix ms>-<seq>)", task, before)
		}
		// Ids increase along list: keep those below before.
		list = list[:sort.Search(len(list), func(i int) bool {
			ems, eseq, _ := parseHistoryID(list[i].ID)
			return ems > ms || ems == ms && eseq >= seq
		})]
	}
	out := make([]HistoryEntry, 0, min(max(n, 0), len(list)))
	for i := len(list) - 1; i >= 0 && len(out) < n; i-- {
		out = append(out, list[i])
	}
	return out, nil
}

// parseHistoryID parses an id "<unix ms>-<seq>".
func parseHistoryID(id string) (ms, seq int64, ok bool) {
	a, b, ok := strings.Cut(id, "-")
	ms, err1 := strconv.ParseInt(a, 10, 64)
	seq, err2 := strconv.ParseInt(b, 10, 64)
	return ms, seq, ok && err1 == nil && err2 == nil
}

// record appends one finished attempt to the history, on the attempt's own
// goroutine once the slot is completed or released, so it holds up no
// slot: only this replica's next claim after a failure, by one round trip
// (historyTimeout at most). It runs under that timeout outliving ctx (an
// attempt cut short by shutdown is recorded too). A failed append is
// logged; the slot's outcome does not depend on it. A goroutine per
// append would cost a burst of ten thousand slots as many goroutines, each
// waiting for the round trip its append leaves in.
func (s *Scheduler) record(ctx context.Context, task string, e HistoryEntry, log func() *slog.Logger) {
	if s.hist == nil {
		return
	}
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), historyTimeout)
	defer cancel()
	if err := s.hist.Append(hctx, task, e); err != nil {
		log().Warn("run history not recorded", "err", err, "outcome", e.Outcome)
	}
}
