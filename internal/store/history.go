package store

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/slotd/slotd/internal/coalesce"
	"github.com/slotd/slotd/internal/config"
	"github.com/slotd/slotd/scheduler"
)

const (
	// MinHistoryTTL is the shortest life of a task's history after its last
	// entry; HistoryTTL raises it to the longest done_ttl.
	MinHistoryTTL = 7 * 24 * time.Hour

	// appendTimeout limits a round trip of appends none of which has a
	// deadline of its own (the engine gives each one).
	appendTimeout = 2 * time.Second
)

// HistoryKey is the Redis stream of task's history under prefix. The braces
// are a Redis Cluster hash tag, as in the slot keys.
func HistoryKey(prefix, task string) string { return prefix + ":history:{" + task + "}" }

// HistoryTTL is how long a task's history lives after its last entry: the
// longest done_ttl of cfg's tasks, and at least MinHistoryTTL, so that the
// history of a slot outlives the slot's own keys.
func HistoryTTL(cfg *config.Config) time.Duration {
	ttl := MinHistoryTTL
	for i := range cfg.Tasks {
		ttl = max(ttl, cfg.Tasks[i].DoneTTL)
	}
	return ttl
}

// HistoryClient is the part of go-redis that RedisHistory needs; a
// *redis.Client or *redis.ClusterClient satisfies it.
type HistoryClient interface {
	TxPipeline() redis.Pipeliner
	XRevRangeN(ctx context.Context, stream, start, stop string, count int64) *redis.XMessageSliceCmd
}

// RedisHistory keeps each task's history in a capped Redis stream,
// HistoryKey(prefix, task), whose TTL every append renews.
//
// Appends go through the same coalescer as lock's claims
// (internal/coalesce): a lone append leaves at once, and appends made while
// one is in flight queue up and leave together, up to historyBatch in one
// transaction, so the slots of a burst that finish together cost a few
// round trips, not one each.
type RedisHistory struct {
	rdb    HistoryClient
	prefix string
	ttl    time.Duration
	out    *coalesce.Coalescer[histAppend, struct{}]
}

// historyBatch bounds the appends of one round trip.
const historyBatch = 256

// histAppend is one Append's request.
type histAppend struct {
	task string
	e    scheduler.HistoryEntry
}

// NewRedisHistory returns the history in rdb under prefix; each append sets
// the stream's TTL to ttl (see HistoryTTL). It does no I/O.
func NewRedisHistory(rdb HistoryClient, prefix string, ttl time.Duration) *RedisHistory {
	h := &RedisHistory{rdb: rdb, prefix: prefix, ttl: ttl}
	h.out = coalesce.New(coalesce.Config[histAppend, struct{}]{
		Send:     h.send,
		MaxBatch: historyBatch,
		Limit:    appendTimeout,
	})
	return h
}

// Append implements scheduler.History: XADD with MAXLEN ~
// scheduler.HistoryMaxLen and PEXPIRE, in one MULTI so that the stream
// never exists without a TTL.
func (h *RedisHistory) Append(ctx context.Context, task string, e scheduler.HistoryEntry) error {
	if _, err := h.out.Do(ctx, histAppend{task, e}); err != nil {
		return fmt.Errorf("history: append %s slot %s attempt %d: %w", task, e.Slot, e.Attempt, err)
	}
	return nil
}

// Close waits for the appends already queued; later ones fail.
func (h *RedisHistory) Close() { h.out.Close() }

// send writes one batch of appends in one transaction.
func (h *RedisHistory) send(ctx context.Context, batch []*coalesce.Call[histAppend, struct{}]) {
	type pending struct {
		c      *coalesce.Call[histAppend, struct{}]
		xadd   *redis.StringCmd
		expire *redis.BoolCmd
	}
	sent := make([]pending, 0, len(batch))
	p := h.rdb.TxPipeline()
	for _, c := range batch {
		key := HistoryKey(h.prefix, c.Req.task)
		e := c.Req.e
		values := []any{
			"slot", e.Slot,
			"slot_time", e.SlotTime.UTC().Format(time.RFC3339),
			"attempt", strconv.Itoa(e.Attempt),
			"token", strconv.FormatInt(e.Token, 10),
			"replica", e.Replica,
			"outcome", e.Outcome,
			"started", e.Started.UTC().Format(time.RFC3339Nano),
			"duration_ms", strconv.FormatInt(e.Duration.Milliseconds(), 10),
			"error", scheduler.TruncateHistoryError(e.Error),
		}
		if e.Output != "" { // most attempts print nothing: no field
			values = append(values, "output", scheduler.TruncateHistoryOutput(e.Output))
		}
		x := p.XAdd(ctx, &redis.XAddArgs{
			Stream: key,
			MaxLen: scheduler.HistoryMaxLen,
			Approx: true,
			Values: values,
		})
		sent = append(sent, pending{c, x, p.PExpire(ctx, key, h.ttl)})
	}
	// A failed round trip sets every command's error; a command that fails
	// on its own (a foreign key of another type) fails only its append.
	// Exec's error is used only if, unexpectedly, no command carries one.
	_, execErr := p.Exec(ctx)
	cmdErr := func(s pending) error {
		if err := s.xadd.Err(); err != nil {
			return err
		}
		return s.expire.Err()
	}
	blame := execErr != nil && !slices.ContainsFunc(sent, func(s pending) bool { return cmdErr(s) != nil })
	for _, s := range sent {
		err := cmdErr(s)
		if err == nil && blame {
			err = execErr
		}
		s.c.Err = err
	}
}

// Recent implements scheduler.History with XREVRANGE. Fields that do not parse are
// left zero: the history is for reading, and one odd entry should not hide
// the others.
func (h *RedisHistory) Recent(ctx context.Context, task string, n int) ([]scheduler.HistoryEntry, error) {
	if n <= 0 {
		return nil, nil
	}
	msgs, err := h.rdb.XRevRangeN(ctx, HistoryKey(h.prefix, task), "+", "-", int64(n)).Result()
	if err != nil {
		return nil, fmt.Errorf("history: read %s: %w", task, err)
	}
	out := make([]scheduler.HistoryEntry, 0, len(msgs))
	for _, m := range msgs {
		out = append(out, decodeEntry(m))
	}
	return out, nil
}

func decodeEntry(m redis.XMessage) scheduler.HistoryEntry {
	str := func(k string) string { s, _ := m.Values[k].(string); return s }
	e := scheduler.HistoryEntry{
		ID:      m.ID,
		Slot:    str("slot"),
		Replica: str("replica"),
		Outcome: str("outcome"),
		Error:   str("error"),
		Output:  str("output"),
	}
	e.SlotTime, _ = time.Parse(time.RFC3339, str("slot_time"))
	e.Started, _ = time.Parse(time.RFC3339Nano, str("started"))
	e.Attempt, _ = strconv.Atoi(str("attempt"))
	e.Token, _ = strconv.ParseInt(str("token"), 10, 64)
	ms, _ := strconv.ParseInt(str("duration_ms"), 10, 64)
	e.Duration = time.Duration(ms) * time.Millisecond
	return e
}
