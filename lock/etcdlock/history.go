package etcdlock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/slotd/slotd/scheduler/history"
)

// History keeps each task's history on the etcd cluster that holds its
// slots: one key per entry, HistoryPrefix(prefix, task) followed by the
// entry's time in zero-padded unix nanoseconds (so keys sort by time) and
// a random suffix, each on a lease of the history TTL shared per expiry
// bucket. Entries appended while one is being written share the next
// transaction. Every
// etcdTrimEvery appends of a task, this process deletes all but its
// newest history.MaxLen entries: a task keeps about that many.
type History struct {
	s      *Store
	prefix string
	ttl    time.Duration
	maxLen int // entries kept per task: history.MaxLen

	mu      sync.Mutex
	appends map[string]int // per task, since this process started
}

// etcdTrimEvery is how many appends of a task pass between two trims.
const etcdTrimEvery = 64

// HistoryPrefix is the key prefix of task's history entries.
func HistoryPrefix(prefix, task string) string { return prefix + ":history:{" + task + "}:" }

// NewHistory returns the history beside s's slots, under prefix, each
// entry living ttl.
func NewHistory(s *Store, prefix string, ttl time.Duration) *History {
	return &History{s: s, prefix: prefix, ttl: ttl, maxLen: history.MaxLen, appends: map[string]int{}}
}

// Append implements history.History.
func (h *History) Append(ctx context.Context, task string, e history.Entry) error {
	e.Error = history.TruncateError(e.Error)
	e.ID = ""
	b, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("history: append %s slot %s attempt %d: %w", task, e.Slot, e.Attempt, err)
	}
	p := HistoryPrefix(h.prefix, task)
	key := fmt.Sprintf("%s%020d-%08x", p, time.Now().UnixNano(), rand.Uint32())
	for try := 0; ; try++ {
		var id clientv3.LeaseID
		if id, err = h.s.ttlLease(ctx, h.ttl); err == nil {
			// batched (txns.go, newWrites): a burst's entries cost a
			// few transactions, not a write each
			_, err = h.s.writes.Do(ctx, txnReq{key: key, then: []clientv3.Op{clientv3.OpPut(key, string(b), clientv3.WithLease(id))}})
		}
		if err == nil || try > 0 || !isLeaseGone(err) {
			break
		}
		h.s.forgetLease(id)
	}
	if err != nil {
		return fmt.Errorf("history: append %s slot %s attempt %d: %w", task, e.Slot, e.Attempt, err)
	}
	h.mu.Lock()
	h.appends[task]++
	trim := h.appends[task]%etcdTrimEvery == 0
	h.mu.Unlock()
	if trim {
		return h.trim(ctx, p)
	}
	return nil
}

func isLeaseGone(err error) bool { return err != nil && errors.Is(err, rpctypes.ErrLeaseNotFound) }

// trim deletes every entry under p but the newest maxLen.
func (h *History) trim(ctx context.Context, p string) error {
	cli := h.s.cli
	resp, err := cli.Get(ctx, p, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend), clientv3.WithLimit(int64(h.maxLen+1)))
	if err != nil || len(resp.Kvs) <= h.maxLen {
		return err
	}
	oldestKept := string(resp.Kvs[h.maxLen-1].Key)
	if _, err := cli.Delete(ctx, p, clientv3.WithRange(oldestKept)); err != nil {
		return fmt.Errorf("history: trim %s: %w", strings.TrimSuffix(p, ":"), err)
	}
	return nil
}

// Recent implements history.History. An entry's ID is "<unix ms>-<etcd
// revision>" of its write; each entry is bounded (history.DecodeJSON).
func (h *History) Recent(ctx context.Context, task string, n int) ([]history.Entry, error) {
	return h.RecentBefore(ctx, task, "", n)
}

// RecentBefore returns up to n of task's entries older than the entry
// whose ID is before ("": the newest), newest first: a range read that
// ends below the cursor's millisecond (keys sort by time), so a page costs
// about n entries however deep it is (it implements observe.HistoryPager).
// Entries of the cursor's own millisecond are older if their revision is.
func (h *History) RecentBefore(ctx context.Context, task, before string, n int) ([]history.Entry, error) {
	if n <= 0 {
		return nil, nil
	}
	p := HistoryPrefix(h.prefix, task)
	end := clientv3.GetPrefixRangeEnd(p)
	var curMS, curRev int64
	if before != "" {
		a, b, ok := strings.Cut(before, "-")
		ms, err1 := strconv.ParseInt(a, 10, 64)
		rev, err2 := strconv.ParseInt(b, 10, 64)
		if !ok || err1 != nil || err2 != nil || ms < 0 {
			return nil, fmt.Errorf("history: read %s: cursor %q is not an id (<unix ms>-<revision>)", task, before)
		}
		curMS, curRev = ms, rev
		end = fmt.Sprintf("%s%020d", p, (ms+1)*int64(time.Millisecond))
	}
	var out []history.Entry
	// Entries of the cursor's millisecond that are not older are skipped,
	// so a page may take another read; a millisecond holds few entries.
	for range 4 {
		resp, err := h.s.cli.Get(ctx, p, clientv3.WithRange(end),
			clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend), clientv3.WithLimit(int64(n-len(out))))
		if err != nil {
			return nil, fmt.Errorf("history: read %s: %w", task, err)
		}
		for _, kv := range resp.Kvs {
			ns, _ := strconv.ParseInt(strings.SplitN(string(kv.Key[len(p):]), "-", 2)[0], 10, 64)
			ms := ns / int64(time.Millisecond)
			if before != "" && ms == curMS && kv.CreateRevision >= curRev {
				continue
			}
			id := strconv.FormatInt(ms, 10) + "-" + strconv.FormatInt(kv.CreateRevision, 10)
			out = append(out, history.DecodeJSON(kv.Value, string(kv.Key), id))
		}
		if len(out) >= n || !resp.More || len(resp.Kvs) == 0 {
			break
		}
		end = string(resp.Kvs[len(resp.Kvs)-1].Key)
	}
	return out, nil
}
