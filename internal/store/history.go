package store

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/slotd/slotd/internal/config"
	"github.com/slotd/slotd/scheduler"
)

const (
	// MinHistoryTTL is the shortest life of a task's history after its last
	// entry; HistoryTTL raises it to the longest done_ttl.
	MinHistoryTTL = 7 * 24 * time.Hour

	// appendTimeout is the least time one round trip of appends gets, the
	// engine's bound on one append (a batch gets the latest deadline among
	// its appends, if later).
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
// Appends made while another is in flight queue up and leave together, up
// to historyBatch in one transaction (one round trip), the way lock's
// batcher sends claims: a lone append goes at once, and the slots of a
// burst that finish together cost a few round trips, not one each.
type RedisHistory struct {
	rdb    HistoryClient
	prefix string
	ttl    time.Duration

	mu      sync.Mutex
	queue   []*histCall // waiting for the next round trip
	leading bool        // a call is sending (or about to send) the queue
}

// historyBatch bounds the appends of one round trip.
const historyBatch = 256

// histCall is one Append waiting for its round trip. lead hands it the
// job of sending the queue; done is closed once err is set.
type histCall struct {
	ctx  context.Context
	task string
	e    scheduler.HistoryEntry
	err  error
	lead chan struct{}
	done chan struct{}
}

// NewRedisHistory returns the history in rdb under prefix; each append sets
// the stream's TTL to ttl (see HistoryTTL). It does no I/O.
func NewRedisHistory(rdb HistoryClient, prefix string, ttl time.Duration) *RedisHistory {
	return &RedisHistory{rdb: rdb, prefix: prefix, ttl: ttl}
}

// Append implements scheduler.History: XADD with MAXLEN ~ scheduler.HistoryMaxLen and PEXPIRE,
// in one MULTI so that the stream never exists without a TTL. No goroutine
// is started: the caller whose append finds nothing in flight sends the
// queue, and hands the lead to the first call still waiting.
func (h *RedisHistory) Append(ctx context.Context, task string, e scheduler.HistoryEntry) error {
	c := &histCall{ctx: ctx, task: task, e: e, lead: make(chan struct{}, 1), done: make(chan struct{})}
	h.mu.Lock()
	h.queue = append(h.queue, c)
	if !h.leading {
		h.leading = true
		c.lead <- struct{}{}
	}
	h.mu.Unlock()
	for {
		select {
		case <-c.lead:
			h.send()
		case <-c.done:
			return c.err
		case <-ctx.Done():
			h.mu.Lock()
			h.queue = slices.DeleteFunc(h.queue, func(x *histCall) bool { return x == c })
			select {
			case <-c.lead: // handed the lead as it gave up: pass it on
				h.passLead()
			default:
			}
			h.mu.Unlock()
			return fmt.Errorf("history: append %s slot %s attempt %d: %w", task, e.Slot, e.Attempt, context.Cause(ctx))
		}
	}
}

// passLead gives the job of sending to the first waiting call, or ends
// it; called with h.mu held.
func (h *RedisHistory) passLead() {
	if len(h.queue) == 0 {
		h.leading = false
		return
	}
	h.queue[0].lead <- struct{}{}
}

// send writes the first historyBatch queued appends in one transaction,
// under the latest deadline among them, and passes the lead on.
func (h *RedisHistory) send() {
	h.mu.Lock()
	n := min(len(h.queue), historyBatch)
	batch := slices.Clone(h.queue[:n])
	h.queue = slices.Delete(h.queue, 0, n)
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.passLead()
		h.mu.Unlock()
	}()

	deadline := time.Now().Add(appendTimeout)
	type pending struct {
		c      *histCall
		xadd   *redis.StringCmd
		expire *redis.BoolCmd
	}
	var sent []pending
	p := h.rdb.TxPipeline()
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil { // gave up while queued
			c.err = err
			close(c.done)
			continue
		}
		if d, ok := c.ctx.Deadline(); ok && d.After(deadline) {
			deadline = d
		}
		key := HistoryKey(h.prefix, c.task)
		e := c.e
		x := p.XAdd(c.ctx, &redis.XAddArgs{
			Stream: key,
			MaxLen: scheduler.HistoryMaxLen,
			Approx: true,
			Values: []any{
				"slot", e.Slot,
				"slot_time", e.SlotTime.UTC().Format(time.RFC3339),
				"attempt", strconv.Itoa(e.Attempt),
				"token", strconv.FormatInt(e.Token, 10),
				"replica", e.Replica,
				"outcome", e.Outcome,
				"started", e.Started.UTC().Format(time.RFC3339Nano),
				"duration_ms", strconv.FormatInt(e.Duration.Milliseconds(), 10),
				"error", scheduler.TruncateHistoryError(e.Error),
			},
		})
		sent = append(sent, pending{c, x, p.PExpire(c.ctx, key, h.ttl)})
	}
	if len(sent) == 0 {
		return
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
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
		if err != nil {
			s.c.err = fmt.Errorf("history: append %s slot %s attempt %d: %w", s.c.task, s.c.e.Slot, s.c.e.Attempt, err)
		}
		close(s.c.done)
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
	}
	e.SlotTime, _ = time.Parse(time.RFC3339, str("slot_time"))
	e.Started, _ = time.Parse(time.RFC3339Nano, str("started"))
	e.Attempt, _ = strconv.Atoi(str("attempt"))
	e.Token, _ = strconv.ParseInt(str("token"), 10, 64)
	ms, _ := strconv.ParseInt(str("duration_ms"), 10, 64)
	e.Duration = time.Duration(ms) * time.Millisecond
	return e
}
