package zklock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/slotd/slotd/scheduler/history"
)

// History keeps each task's history on the ensemble, beside the
// slots: one persistent sequential TTL node per entry under
// <root>/.history/<task> (a container), its data the entry as JSON. Each
// entry lives ttl; about history.MaxLen are kept per
// task, the oldest deleted every historyTrimEvery appends.
type History struct {
	s   *Store
	ttl time.Duration
	mu  sync.Mutex // one trim at a time
}

// historyTrimEvery is how many appends to a task pass between trims.
const historyTrimEvery = 64

// NewHistory returns the history of store s; entries live ttl.
func NewHistory(s *Store, ttl time.Duration) *History {
	return &History{s: s, ttl: ttl}
}

func (h *History) dir(task string) string {
	return h.s.root + "/.history/" + strings.TrimPrefix(h.s.TaskPath(task), h.s.root+"/")
}

// Append implements history.History.
func (h *History) Append(ctx context.Context, task string, e history.Entry) error {
	e.Error = history.TruncateError(e.Error)
	e.ID = ""
	b, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("history: append %s slot %s attempt %d: %w", task, e.Slot, e.Attempt, err)
	}
	c, dir := h.s.conn, h.dir(task)
	for try := 0; ; try++ {
		p, err := call(ctx, func() (string, error) {
			return c.CreateTTL(dir+"/e-", b, zk.FlagPersistentSequentialWithTTL, h.s.acl, h.ttl)
		})
		if errors.Is(err, zk.ErrNoNode) && try == 0 {
			for _, d := range []string{h.s.root, h.s.root + "/.history", dir} {
				if _, err := call(ctx, func() (string, error) { return c.CreateContainer(d, nil, zk.FlagContainer, h.s.acl) }); err != nil && !errors.Is(err, zk.ErrNodeExists) {
					return fmt.Errorf("history: append %s: create %s: %w", task, d, err)
				}
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("history: append %s slot %s attempt %d: %w", task, e.Slot, e.Attempt, err)
		}
		if n, _ := strconv.Atoi(p[strings.LastIndex(p, "-")+1:]); n >= history.MaxLen && n%historyTrimEvery == 0 {
			h.trim(ctx, dir)
		}
		return nil
	}
}

// trim deletes the oldest entries beyond history.MaxLen; a failure is left
// to the next trim (and the entries' TTL).
func (h *History) trim(ctx context.Context, dir string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	kids, err := call(ctx, func() ([]string, error) { kids, _, err := h.s.conn.Children(dir); return kids, err })
	if err != nil || len(kids) <= history.MaxLen {
		return
	}
	slices.Sort(kids) // the sequence numbers are zero-padded
	for _, k := range kids[:len(kids)-history.MaxLen] {
		if _, err := call(ctx, func() (struct{}, error) { return struct{}{}, h.s.conn.Delete(dir+"/"+k, -1) }); err != nil && !errors.Is(err, zk.ErrNoNode) {
			return
		}
	}
}

// Recent implements history.History: the newest n entries, read at
// once. An entry's ID is "<unix ms>-<sequence>" of its node's creation;
// each entry is bounded (history.DecodeJSON).
func (h *History) Recent(ctx context.Context, task string, n int) ([]history.Entry, error) {
	return h.RecentBefore(ctx, task, "", n)
}

// RecentBefore returns up to n of task's entries older than the entry
// whose ID is before ("": the newest), newest first: the children's names
// (at most about history.MaxLen) and then n entries, however
// deep the page (it implements observe.HistoryPager).
func (h *History) RecentBefore(ctx context.Context, task, before string, n int) ([]history.Entry, error) {
	if n <= 0 {
		return nil, nil
	}
	below := int64(-1) // the cursor's sequence number; -1: none
	if before != "" {
		_, b, ok := strings.Cut(before, "-")
		seq, err := strconv.ParseInt(b, 10, 64)
		if !ok || err != nil || seq < 0 {
			return nil, fmt.Errorf("history: read %s: cursor %q is not an id (<unix ms>-<sequence>)", task, before)
		}
		below = seq
	}
	dir := h.dir(task)
	kids, err := call(ctx, func() ([]string, error) { kids, _, err := h.s.conn.Children(dir); return kids, err })
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("history: read %s: %w", task, err)
	}
	slices.Sort(kids)
	slices.Reverse(kids)
	if below >= 0 {
		kids = slices.DeleteFunc(kids, func(k string) bool {
			seq, err := strconv.ParseInt(strings.TrimPrefix(k, "e-"), 10, 64)
			return err != nil || seq >= below
		})
	}
	kids = kids[:min(n, len(kids))]
	out := make([]history.Entry, len(kids))
	ok := make([]bool, len(kids))
	var wg sync.WaitGroup
	var firstErr error
	var mu sync.Mutex
	for i, k := range kids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			type got struct {
				b    []byte
				stat *zk.Stat
			}
			g, err := call(ctx, func() (got, error) { b, st, err := h.s.conn.Get(dir + "/" + k); return got{b, st}, err })
			switch {
			case errors.Is(err, zk.ErrNoNode): // trimmed or expired meanwhile
			case err != nil:
				mu.Lock()
				firstErr = err
				mu.Unlock()
			default:
				seq, _ := strconv.ParseInt(strings.TrimPrefix(k, "e-"), 10, 64)
				id := strconv.FormatInt(g.stat.Ctime, 10) + "-" + strconv.FormatInt(seq, 10)
				out[i], ok[i] = history.DecodeJSON(g.b, dir+"/"+k, id), true
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return nil, fmt.Errorf("history: read %s: %w", task, firstErr)
	}
	kept := out[:0]
	for i := range out {
		if ok[i] {
			kept = append(kept, out[i])
		}
	}
	return kept, nil
}
