package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
)

// Run history: one entry per finished attempt, kept per task, newest last.
// It is what `slotd history`, `slotd status` and the status page show for
// "how long, where, and why not". It is a record, not part of the slot
// protocol: an entry that cannot be written is logged and the slot goes on.
const (
	// HistoryMaxLen is about how many entries a task's history keeps; Redis
	// trims the stream lazily (MAXLEN ~), so it may hold a few more.
	HistoryMaxLen = 1000
	// MinHistoryTTL is the shortest life of a task's history after its last
	// entry; HistoryTTL raises it to the longest done_ttl.
	MinHistoryTTL = 7 * 24 * time.Hour
	// MaxHistoryError bounds the error text of an entry, in bytes.
	MaxHistoryError = 1024

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
	Outcome  string        `json:"outcome"` // success, failure, timeout, lease_lost or canceled (as slotd_runs_total)
	Started  time.Time     `json:"started"`
	Duration time.Duration `json:"-"`               // written as duration_ms
	Error    string        `json:"error,omitempty"` // at most MaxHistoryError bytes of valid UTF-8
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

// History is where attempts are recorded. RedisHistory and MemoryHistory
// implement it.
type History interface {
	// Append records e as task's newest entry.
	Append(ctx context.Context, task string, e HistoryEntry) error
	// Recent returns up to n of task's entries, newest first.
	Recent(ctx context.Context, task string, n int) ([]HistoryEntry, error)
}

// HistoryKey is the Redis stream of task's history under prefix. The braces
// are a Redis Cluster hash tag, as in the slot keys.
func HistoryKey(prefix, task string) string { return prefix + ":history:{" + task + "}" }

// HistoryTTL is how long a task's history lives after its last entry: the
// longest done_ttl of tasks, and at least MinHistoryTTL, so that the
// history of a slot outlives the slot's own keys.
func HistoryTTL(tasks []Task) time.Duration {
	ttl := MinHistoryTTL
	for i := range tasks {
		ttl = max(ttl, tasks[i].DoneTTL)
	}
	return ttl
}

// truncateError makes s valid UTF-8 of at most MaxHistoryError bytes,
// marking a cut with "…".
func truncateError(s string) string {
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
	e    HistoryEntry
	err  error
	lead chan struct{}
	done chan struct{}
}

// NewRedisHistory returns the history in rdb under prefix; each append sets
// the stream's TTL to ttl (see HistoryTTL). It does no I/O.
func NewRedisHistory(rdb HistoryClient, prefix string, ttl time.Duration) *RedisHistory {
	return &RedisHistory{rdb: rdb, prefix: prefix, ttl: ttl}
}

// Append implements History: XADD with MAXLEN ~ HistoryMaxLen and PEXPIRE,
// in one MULTI so that the stream never exists without a TTL. No goroutine
// is started: the caller whose append finds nothing in flight sends the
// queue, and hands the lead to the first call still waiting.
func (h *RedisHistory) Append(ctx context.Context, task string, e HistoryEntry) error {
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

	deadline := time.Now().Add(historyTimeout)
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
			MaxLen: HistoryMaxLen,
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
				"error", truncateError(e.Error),
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

// Recent implements History with XREVRANGE. Fields that do not parse are
// left zero: the history is for reading, and one odd entry should not hide
// the others.
func (h *RedisHistory) Recent(ctx context.Context, task string, n int) ([]HistoryEntry, error) {
	if n <= 0 {
		return nil, nil
	}
	msgs, err := h.rdb.XRevRangeN(ctx, HistoryKey(h.prefix, task), "+", "-", int64(n)).Result()
	if err != nil {
		return nil, fmt.Errorf("history: read %s: %w", task, err)
	}
	out := make([]HistoryEntry, 0, len(msgs))
	for _, m := range msgs {
		out = append(out, decodeEntry(m))
	}
	return out, nil
}

func decodeEntry(m redis.XMessage) HistoryEntry {
	str := func(k string) string { s, _ := m.Values[k].(string); return s }
	e := HistoryEntry{
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
	e.Error = truncateError(e.Error)
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

// MultiHistory keeps the history on several independent stores at once —
// every node of a Redlock deployment — so that it survives the loss of
// any of them but one. An entry is appended to every store in parallel
// (the append succeeds when one store took it: the history is a record,
// not a vote); a read merges what every store that answers returns,
// without duplicates, newest start first. Ids are those of the store the
// entry was first read from, so they are not comparable across entries.
type MultiHistory struct {
	hs []History
}

// NewMultiHistory returns the history kept on every one of hs.
func NewMultiHistory(hs ...History) *MultiHistory { return &MultiHistory{hs: hs} }

// eachHistory runs f on every store in parallel and waits for all of them.
func (m *MultiHistory) eachHistory(f func(i int, h History) error) []error {
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

// Append implements History: on every store; an error only when no store
// took the entry.
func (m *MultiHistory) Append(ctx context.Context, task string, e HistoryEntry) error {
	return failed(m.eachHistory(func(_ int, h History) error { return h.Append(ctx, task, e) }))
}

// Recent implements History: the newest n entries among every store that
// answers; an error only when none does.
func (m *MultiHistory) Recent(ctx context.Context, task string, n int) ([]HistoryEntry, error) {
	got := make([][]HistoryEntry, len(m.hs))
	if err := failed(m.eachHistory(func(i int, h History) (err error) {
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
	var out []HistoryEntry
	for _, es := range got {
		for _, e := range es {
			k := id{e.Slot, e.Replica, e.Attempt, e.Started.UTC()}
			if !seen[k] {
				seen[k] = true
				out = append(out, e)
			}
		}
	}
	slices.SortStableFunc(out, func(a, b HistoryEntry) int { return b.Started.Compare(a.Started) })
	return out[:min(len(out), max(n, 0))], nil
}
