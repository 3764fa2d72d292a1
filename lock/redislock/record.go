package redislock

import (
	"context"
	"fmt"
	"time"

	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/scheduler/history"
)

// record is a history entry that a completion appends in its own step
// (complete.lua).
type record struct {
	stream string
	maxLen int64
	ttl    time.Duration
	renew  bool // renew the stream's TTL with this entry
	values [len(entryNames)]any
}

// CompleteRecorded marks slot done for owner, as store.Complete does, and
// appends e to the task's history in the same step when store is the
// Store this history was opened beside (Open) on one server or Sentinel:
// one script, complete.lua, so that a success costs one round trip and
// Redis one call, fused with the other completions of its round trip, and
// its entry is appended exactly when the slot is marked done (a call
// retried after a lost reply finds the slot done and appends nothing
// again). recorded reports that e was appended so. Otherwise — another
// store; a Redis Cluster, whose stream lives on another shard than the
// slot's keys; min_replicas_ack, whose completion waits on its own
// connection; a stream key of another type — recorded is false and the
// caller appends e with Append, as before.
func (h *History) CompleteRecorded(ctx context.Context, store lock.Store, slot lock.Slot, owner lock.Owner, doneTTL time.Duration, e history.Entry) (recorded bool, err error) {
	s := h.beside
	if s == nil || store != lock.Store(s) {
		return false, store.Complete(ctx, slot, owner, doneTTL)
	}
	key := HistoryKey(h.prefix, slot.Task)
	rec := &record{stream: key, maxLen: history.MaxLen, ttl: h.ttl, renew: h.due(key, time.Now()), values: entryValues(e)}
	keys, args := s.completeArgs(slot, owner, doneTTL, rec)
	n, err := s.batch.run(ctx, completeRecordScript, keys, args...).Int()
	if rec.renew && (err != nil || n != 1) {
		h.forget(key) // the next append renews the TTL
	}
	switch {
	case err != nil:
		return false, redisErr(fmt.Errorf("lock: complete %s attempt %d: %w", slot, owner.Attempt, err))
	case n == 0:
		return false, fmt.Errorf("lock: complete %s attempt %d: %w", slot, owner.Attempt, lock.ErrNotHeld)
	case n == 2: // done, but the stream key holds another type
		return false, nil
	}
	return true, nil
}
