package store

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

	"github.com/slotd/slotd/lock/etcdlock"
	"github.com/slotd/slotd/scheduler"
)

// EtcdHistory keeps each task's history on the etcd cluster that holds its
// slots: one key per entry, EtcdHistoryPrefix(prefix, task) followed by the
// entry's time in zero-padded unix nanoseconds (so keys sort by time) and
// a random suffix, each on a lease of the history TTL shared per expiry
// bucket. Every etcdTrimEvery appends of a task, this process deletes all
// but its newest scheduler.HistoryMaxLen entries: a task keeps about that
// many.
type EtcdHistory struct {
	s      *etcdlock.Store
	prefix string
	ttl    time.Duration
	maxLen int // entries kept per task: scheduler.HistoryMaxLen

	mu      sync.Mutex
	appends map[string]int // per task, since this process started
}

// etcdTrimEvery is how many appends of a task pass between two trims.
const etcdTrimEvery = 64

// EtcdHistoryPrefix is the key prefix of task's history entries.
func EtcdHistoryPrefix(prefix, task string) string { return prefix + ":history:{" + task + "}:" }

// NewEtcdHistory returns the history beside s's slots, under prefix, each
// entry living ttl.
func NewEtcdHistory(s *etcdlock.Store, prefix string, ttl time.Duration) *EtcdHistory {
	return &EtcdHistory{s: s, prefix: prefix, ttl: ttl, maxLen: scheduler.HistoryMaxLen, appends: map[string]int{}}
}

// Append implements scheduler.History.
func (h *EtcdHistory) Append(ctx context.Context, task string, e scheduler.HistoryEntry) error {
	e.Error = scheduler.TruncateHistoryError(e.Error)
	e.ID = ""
	b, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("history: append %s slot %s attempt %d: %w", task, e.Slot, e.Attempt, err)
	}
	p := EtcdHistoryPrefix(h.prefix, task)
	key := fmt.Sprintf("%s%020d-%08x", p, time.Now().UnixNano(), rand.Uint32())
	cli := h.s.Client()
	for try := 0; ; try++ {
		var id clientv3.LeaseID
		if id, err = h.s.TTLLease(ctx, h.ttl); err == nil {
			_, err = cli.Put(ctx, key, string(b), clientv3.WithLease(id))
		}
		if err == nil || try > 0 || !isLeaseGone(err) {
			break
		}
		h.s.ForgetLease(id)
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

// trim deletes every entry under p but the newest HistoryMaxLen.
func (h *EtcdHistory) trim(ctx context.Context, p string) error {
	cli := h.s.Client()
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

// Recent implements scheduler.History. An entry's ID is "<unix ms>-<etcd
// revision>" of its write.
func (h *EtcdHistory) Recent(ctx context.Context, task string, n int) ([]scheduler.HistoryEntry, error) {
	if n <= 0 {
		return nil, nil
	}
	resp, err := h.s.Client().Get(ctx, EtcdHistoryPrefix(h.prefix, task), clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend), clientv3.WithLimit(int64(n)))
	if err != nil {
		return nil, fmt.Errorf("history: read %s: %w", task, err)
	}
	out := make([]scheduler.HistoryEntry, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var e scheduler.HistoryEntry
		if err := json.Unmarshal(kv.Value, &e); err != nil {
			return out, fmt.Errorf("history: read %s: entry %s: %w", task, kv.Key, err)
		}
		ns, _ := strconv.ParseInt(strings.SplitN(string(kv.Key[len(EtcdHistoryPrefix(h.prefix, task)):]), "-", 2)[0], 10, 64)
		e.ID = strconv.FormatInt(ns/int64(time.Millisecond), 10) + "-" + strconv.FormatInt(kv.CreateRevision, 10)
		out = append(out, e)
	}
	return out, nil
}
