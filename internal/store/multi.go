package store

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/slotd/slotd/scheduler"
)

// MultiHistory keeps the history on several independent stores at once —
// every node of a Redlock deployment — so that it survives the loss of
// any of them but one. An entry is appended to every store in parallel
// (the append succeeds when one store took it: the history is a record,
// not a vote); a read merges what every store that answers returns,
// without duplicates, newest start first. Ids are those of the store the
// entry was first read from, so they are not comparable across entries.
type MultiHistory struct {
	hs []scheduler.History
}

// NewMultiHistory returns the history kept on every one of hs.
func NewMultiHistory(hs ...scheduler.History) *MultiHistory { return &MultiHistory{hs: hs} }

// eachHistory runs f on every store in parallel and waits for all of them.
func (m *MultiHistory) eachHistory(f func(i int, h scheduler.History) error) []error {
	errs := make([]error, len(m.hs))
	var wg sync.WaitGroup
	for i, h := range m.hs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(i, h)
		}()
	}
	wg.Wait()
	return errs
}

// failed joins errs if every one of them is an error, else returns nil.
func failed(errs []error) error {
	for _, err := range errs {
		if err == nil {
			return nil
		}
	}
	return errors.Join(errs...)
}

// Append implements scheduler.History: on every store; an error only when no store
// took the entry.
func (m *MultiHistory) Append(ctx context.Context, task string, e scheduler.HistoryEntry) error {
	return failed(m.eachHistory(func(_ int, h scheduler.History) error { return h.Append(ctx, task, e) }))
}

// Recent implements scheduler.History: the newest n entries among every store that
// answers; an error only when none does.
func (m *MultiHistory) Recent(ctx context.Context, task string, n int) ([]scheduler.HistoryEntry, error) {
	got := make([][]scheduler.HistoryEntry, len(m.hs))
	if err := failed(m.eachHistory(func(i int, h scheduler.History) (err error) {
		got[i], err = h.Recent(ctx, task, n)
		return err
	})); err != nil {
		return nil, err
	}
	type id struct {
		slot, replica string
		attempt       int
		started       time.Time
	}
	seen := map[id]bool{}
	var out []scheduler.HistoryEntry
	for _, es := range got {
		for _, e := range es {
			k := id{e.Slot, e.Replica, e.Attempt, e.Started.UTC()}
			if !seen[k] {
				seen[k] = true
				out = append(out, e)
			}
		}
	}
	slices.SortStableFunc(out, func(a, b scheduler.HistoryEntry) int { return b.Started.Compare(a.Started) })
	return out[:min(len(out), max(n, 0))], nil
}
