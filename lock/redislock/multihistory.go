package redislock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/slotd/slotd/scheduler/history"
)

// MultiHistory keeps the history on several independent stores at once —
// every node of a Redlock deployment — so that it survives the loss of
// any of them but one. An entry is appended to every store in parallel
// (the append succeeds when one store took it: the history is a record,
// not a vote); a read merges what every store that answers returns,
// without duplicates, newest start first. Ids are those of the store the
// entry was first read from, so they are not comparable across entries.
type MultiHistory struct {
	hs []history.History
}

// NewMultiHistory returns the history kept on every one of hs.
func NewMultiHistory(hs ...history.History) *MultiHistory { return &MultiHistory{hs: hs} }

// Close closes every one of its histories that can be closed (a History
// waits for the appends already queued).
func (m *MultiHistory) Close() {
	for _, h := range m.hs {
		if c, ok := h.(interface{ Close() }); ok {
			c.Close()
		}
	}
}

// eachHistory runs f on every store in parallel and waits for all of them.
func (m *MultiHistory) eachHistory(f func(i int, h history.History) error) []error {
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

// Append implements history.History: on every store; an error only when no store
// took the entry.
func (m *MultiHistory) Append(ctx context.Context, task string, e history.Entry) error {
	return failed(m.eachHistory(func(_ int, h history.History) error { return h.Append(ctx, task, e) }))
}

// Recent implements history.History: the newest n entries among every store that
// answers; an error only when none does.
func (m *MultiHistory) Recent(ctx context.Context, task string, n int) ([]history.Entry, error) {
	return m.merge(n, func(h history.History) ([]history.Entry, error) { return h.Recent(ctx, task, n) })
}

// pager is a history that reads a page below a cursor (observe.HistoryPager).
type pager interface {
	RecentBefore(ctx context.Context, task, before string, n int) ([]history.Entry, error)
}

// RecentBefore returns up to n of task's entries older than the entry
// whose ID is before ("": the newest), newest first, merged as Recent
// merges: each store is asked for its page below the cursor (its ids are
// its own clock's milliseconds, so the page's edge is as exact as the
// stores' clocks agree), so a page costs n entries per store however deep
// it is.
func (m *MultiHistory) RecentBefore(ctx context.Context, task, before string, n int) ([]history.Entry, error) {
	return m.merge(n, func(h history.History) ([]history.Entry, error) {
		if p, ok := h.(pager); ok {
			return p.RecentBefore(ctx, task, before, n)
		}
		if before == "" {
			return h.Recent(ctx, task, n)
		}
		return nil, fmt.Errorf("history: read %s before %s: the store cannot read a page", task, before)
	})
}

// merge reads every store with read, in parallel, and merges what those
// that answer return: the newest n, each entry once; an error only when
// no store answers.
func (m *MultiHistory) merge(n int, read func(history.History) ([]history.Entry, error)) ([]history.Entry, error) {
	got := make([][]history.Entry, len(m.hs))
	if err := failed(m.eachHistory(func(i int, h history.History) (err error) {
		got[i], err = read(h)
		return err
	})); err != nil {
		return nil, err
	}
	type id struct {
		slot, replica string
		attempt       int
		started       time.Time
	}
	// An entry kept on several stores takes the lowest of its ids, so that
	// as a cursor it leaves every copy of it out of the next page.
	seen := map[id]int{}
	var out []history.Entry
	for _, es := range got {
		for _, e := range es {
			k := id{e.Slot, e.Replica, e.Attempt, e.Started.UTC()}
			if i, ok := seen[k]; !ok {
				seen[k] = len(out)
				out = append(out, e)
			} else if idLess(e.ID, out[i].ID) {
				out[i].ID = e.ID
			}
		}
	}
	slices.SortStableFunc(out, func(a, b history.Entry) int { return b.Started.Compare(a.Started) })
	return out[:min(len(out), max(n, 0))], nil
}

// idLess reports whether id a ("<unix ms>-<seq>") is below b; one that
// does not parse is not.
func idLess(a, b string) bool {
	am, as, aok := parseID(a)
	bm, bs, bok := parseID(b)
	return aok && bok && (am < bm || am == bm && as < bs)
}

func parseID(id string) (ms, seq uint64, ok bool) {
	x, y, ok := strings.Cut(id, "-")
	ms, err1 := strconv.ParseUint(x, 10, 64)
	seq, err2 := strconv.ParseUint(y, 10, 64)
	return ms, seq, ok && err1 == nil && err2 == nil
}
