// Package history is the vocabulary of slotd's run history: one Entry per
// finished attempt, kept per task, newest last; the History interface every
// store's history implements (lock/redislock, lock/etcdlock, lock/zklock,
// and Memory here); the bounds an entry is kept within (MaxLen, MaxError,
// MaxOutput) and how they are applied (TruncateError, TruncateOutput,
// CutMark, DecodeJSON). It imports only the standard library, so that the
// engine and every store package can share it.
package history

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Run history: one entry per finished attempt, kept per task, newest last.
// It is what `slotd history`, `slotd status` and the status page show for
// "how long, where, and why not". It is a record, not part of the slot
// protocol: an entry that cannot be written is logged and the slot goes on.
const (
	// MaxLen is about how many entries a task's history keeps; Redis
	// trims the stream lazily (MAXLEN ~), so it may hold a few more.
	MaxLen = 1000
	// MaxError bounds the error text of an entry, in bytes.
	MaxError = 1024
	// MaxOutput bounds the output of an entry, in bytes (its
	// tail is kept), whatever a task's OutputTail: tasks.MaxOutputTail.
	MaxOutput = 64 << 10
)

// Outcome is how an attempt ended, by the name the history and the
// metrics give it (package stats names those slotd writes). It is a
// string because it travels: an entry written by another release keeps
// an outcome this one does not know.
type Outcome string

// Entry is one finished attempt of one slot.
type Entry struct {
	ID       string        `json:"id"` // assigned by Append; a Redis stream id, "<unix ms>-<seq>"
	Slot     string        `json:"slot"`
	SlotTime time.Time     `json:"slot_time"`
	Attempt  int           `json:"attempt"`
	Token    int64         `json:"token"`
	Replica  string        `json:"replica"`
	Outcome  Outcome       `json:"outcome"` // as slotd_runs_total (success, failure, timeout, lease_lost, canceled, success_unmarked, superseded, record_lost), or a skip or miss
	Started  time.Time     `json:"started"`
	Duration time.Duration `json:"-"`               // written as duration_ms
	Error    string        `json:"error,omitempty"` // at most MaxError bytes of valid UTF-8
	// Output is the tail of what the attempt printed or returned (see
	// tasks.Output): at most the task's OutputTail bytes, never more than
	// MaxOutput, of valid UTF-8. It is the task's own, so it is
	// attacker-controlled text: escape it wherever it is shown.
	Output string `json:"output,omitempty"`
	// Backfilled: an operator's backfill started the slot (slotd backfill).
	Backfilled bool `json:"backfilled,omitempty"`
}

// historyJSON is Entry as JSON: the duration in milliseconds.
type historyJSON struct {
	plainEntry
	DurationMS int64 `json:"duration_ms"`
}

type plainEntry Entry // without the JSON methods

// MarshalJSON writes the duration as duration_ms.
func (e Entry) MarshalJSON() ([]byte, error) {
	return json.Marshal(historyJSON{plainEntry(e), e.Duration.Milliseconds()})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (e *Entry) UnmarshalJSON(b []byte) error {
	var j historyJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*e = Entry(j.plainEntry)
	e.Duration = time.Duration(j.DurationMS) * time.Millisecond
	return nil
}

// History is where attempts are recorded. Memory implements it, and
// so does each store package's History (lock/redislock, lock/etcdlock,
// lock/zklock).
type History interface {
	// Append records e as task's newest entry.
	Append(ctx context.Context, task string, e Entry) error
	// Recent returns up to n of task's entries, newest first.
	Recent(ctx context.Context, task string, n int) ([]Entry, error)
}

// TruncateError makes s valid UTF-8 of at most MaxError
// bytes, marking a cut with "…": how every History stores an entry's
// Error.
func TruncateError(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= MaxError {
		return s
	}
	const mark = "…"
	cut := MaxError - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}

// TruncateOutput makes s valid UTF-8 of at most MaxOutput
// bytes, keeping its tail and marking a cut with "…": how every History
// stores an entry's Output.
func TruncateOutput(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= MaxOutput {
		return s
	}
	const mark = "…"
	cut := len(s) - (MaxOutput - len(mark))
	for cut < len(s) && !utf8.RuneStart(s[cut]) {
		cut++
	}
	return mark + s[cut:]
}

// CutMark is what an entry read back with a part cut off says first in
// its Error: the store's key and the entry, and what was cut (cut). Only
// an entry slotd did not write can be cut on read: its own are within
// MaxError and MaxOutput.
func CutMark(key, id, cut string) string {
	return fmt.Sprintf("[history entry %s of %s cut on read: %s] ", id, key, cut)
}

// Memory keeps each task's latest entries in this process: the
// history of the embedded store, and of tests.
type Memory struct {
	max int

	mu   sync.Mutex
	m    map[string][]Entry // oldest first
	last int64              // the last id's milliseconds
	seq  int64              // and its sequence number
}

// NewMemory returns an empty history that keeps the latest max
// entries per task (MaxLen if max <= 0).
func NewMemory(max int) *Memory {
	if max <= 0 {
		max = MaxLen
	}
	return &Memory{max: max, m: map[string][]Entry{}}
}

// Append implements History. Ids are "<unix ms>-<seq>" and increase, as a
// stream's do.
func (h *Memory) Append(ctx context.Context, task string, e Entry) error {
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
	e.Error = TruncateError(e.Error)
	e.Output = TruncateOutput(e.Output)
	list := append(h.m[task], e)
	if len(list) >= 2*h.max { // trim in batches, as Redis does, not on every append
		list = append(list[:0:0], list[len(list)-h.max:]...)
	}
	h.m[task] = list
	return nil
}

// Recent implements History.
func (h *Memory) Recent(ctx context.Context, task string, n int) ([]Entry, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("history: read %s: %w", task, err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	list := h.m[task]
	if len(list) > h.max {
		list = list[len(list)-h.max:]
	}
	out := make([]Entry, 0, min(max(n, 0), len(list)))
	for i := len(list) - 1; i >= 0 && len(out) < n; i-- {
		out = append(out, list[i])
	}
	return out, nil
}

// RecentBefore returns up to n of task's entries older than the entry
// whose id is before ("": the newest), newest first, without copying the
// newer ones: a page costs n entries however deep it is. Entries are
// bounded at Append (TruncateError, TruncateOutput), so a
// page holds at most n of those.
func (h *Memory) RecentBefore(ctx context.Context, task, before string, n int) ([]Entry, error) {
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
		ms, seq, ok := parseID(before)
		if !ok {
			return nil, fmt.Errorf("history: read %s: cursor %q is not an id (<unix ms>-<seq>)", task, before)
		}
		// Ids increase along list: keep those below before.
		list = list[:sort.Search(len(list), func(i int) bool {
			ems, eseq, _ := parseID(list[i].ID)
			return ems > ms || ems == ms && eseq >= seq
		})]
	}
	out := make([]Entry, 0, min(max(n, 0), len(list)))
	for i := len(list) - 1; i >= 0 && len(out) < n; i-- {
		out = append(out, list[i])
	}
	return out, nil
}

// parseID parses an id "<unix ms>-<seq>".
func parseID(id string) (ms, seq int64, ok bool) {
	a, b, ok := strings.Cut(id, "-")
	ms, err1 := strconv.ParseInt(a, 10, 64)
	seq, err2 := strconv.ParseInt(b, 10, 64)
	return ms, seq, ok && err1 == nil && err2 == nil
}
