package redislock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/internal/coalesce"
	"github.com/slotd/slotd/scheduler/history"
)

// appendTimeout limits a round trip of appends none of which has a
// deadline of its own (the engine gives each one).
const appendTimeout = 2 * time.Second

// HistoryKey is the Redis stream of task's history under prefix. The braces
// are a Redis Cluster hash tag, as in the slot keys.
func HistoryKey(prefix, task string) string { return prefix + ":history:{" + task + "}" }

// HistoryClient is the part of go-redis that History needs; a
// *redis.Client or *redis.ClusterClient satisfies it.
type HistoryClient interface {
	redis.Scripter
	Pipeline() redis.Pipeliner
}

// readScript reads a page of a stream with every entry bounded (see its
// header, and readCaps).
//
//go:embed history_read.lua
var readLua string

var readScript = redis.NewScript(readLua)

// appendScript is a stream's full append: XADD and PEXPIRE in one step
// (see its header).
//
//go:embed history_append.lua
var appendLua string

var appendScript = redis.NewScript(appendLua)

// Caps of an entry read back: a value other than the output (as long as
// an entry's error), the output, a field's name, and the fields of one
// entry (slotd writes ten). slotd's own entries are within them; what is
// beyond was written by someone else, and is cut before it leaves Redis.
const (
	readValueCap  = history.MaxError
	readOutputCap = history.MaxOutput
	readNameCap   = 64
	readFieldsCap = 16
)

// ReadPageBudget is about the most bytes of values a page of history
// (RecentBefore) holds: a page of entries with large outputs ends early,
// its last entry the one that passed it, so that reading it costs Redis
// and the daemon about this much, however many entries were asked for.
// It is observe.MaxPageBytes and an output more, so that the page the
// status endpoints cut from it (counting more than the values) ends
// before it does and says where the next one begins.
const ReadPageBudget = 1<<20 + history.MaxOutput

// readArgs are history_read.lua's ARGV for a page of n entries at or
// below end, within budget bytes (0: none), the newest keep of which keep
// their output.
func readArgs(end string, n, budget, keep int) []any {
	return []any{end, n, readValueCap, readOutputCap, readNameCap, readFieldsCap, budget, keep}
}

// History keeps each task's history in a capped Redis stream,
// HistoryKey(prefix, task), whose TTL appends renew: the first append to a
// stream and then one every ttlRefresh. The appends between add with
// NOMKSTREAM, so a stream is never created without its TTL: one that has
// gone (expired, deleted) makes such an append fail, and it is sent again
// as a full append, XADD and PEXPIRE in one script (history_append.lua).
// A PEXPIRE per entry was
// a fifth of Redis's cost of an append under sustained load.
//
// Appends go through the same coalescer as the store's claims
// (internal/coalesce, see batch.go): a lone append leaves at once, and
// appends made while one is in flight queue up and leave together, up to
// historyBatch in one pipeline, so the slots of a burst that finish
// together cost a few round trips, not one each.
type History struct {
	rdb    HistoryClient
	prefix string
	ttl    time.Duration
	out    *coalesce.Coalescer[histAppend, struct{}]

	mu  sync.Mutex
	set map[string]time.Time // stream key -> when an append last gave it its TTL

	// beside: the store whose completions append a success's entry in
	// their own step (CompleteRecorded), set by Open on one server or
	// Sentinel; nil otherwise.
	beside *Store

	loadMu sync.Mutex     // one SCRIPT LOAD at a time
	loaded [2]atomic.Bool // readScript, appendScript was loaded once (a pipeline cannot fall back to EVAL)
}

// historyBatch bounds the appends of one round trip.
const historyBatch = 256

// ttlRefresh is how often appends renew a stream's TTL (at most a tenth of
// the TTL): a stream an append reached keeps at least ttl - ttlRefresh of
// life after it.
const ttlRefresh = 5 * time.Minute

// histAppend is one Append's request.
type histAppend struct {
	task string
	e    history.Entry
}

// NewHistory returns the history in rdb under prefix; each append sets
// the stream's TTL to ttl (the daemon gives the longest done_ttl, at
// least a week: internal/store.HistoryTTL). It does no I/O.
func NewHistory(rdb HistoryClient, prefix string, ttl time.Duration) *History {
	h := &History{rdb: rdb, prefix: prefix, ttl: ttl, set: map[string]time.Time{}}
	h.out = coalesce.New(coalesce.Config[histAppend, struct{}]{
		Send:     h.send,
		MaxBatch: historyBatch,
		Limit:    appendTimeout,
	})
	return h
}

// Append implements history.History: XADD with MAXLEN ~
// history.MaxLen, with the stream's TTL renewed as History
// says, so that the stream never exists without a TTL.
func (h *History) Append(ctx context.Context, task string, e history.Entry) error {
	if _, err := h.out.Do(ctx, histAppend{task, e}); err != nil {
		return fmt.Errorf("history: append %s slot %s attempt %d: %w", task, e.Slot, e.Attempt, err)
	}
	return nil
}

// Close waits for the appends already queued; later ones fail.
func (h *History) Close() { h.out.Close() }

// send writes one batch of appends in one transaction, then sends again,
// in full, the appends whose stream had gone.
func (h *History) send(ctx context.Context, batch []*coalesce.Call[histAppend, struct{}]) {
	now := time.Now()
	full := make([]bool, len(batch))
	for i, c := range batch {
		full[i] = h.due(HistoryKey(h.prefix, c.Req.task), now) // one full append per key and batch is enough
	}
	var again []*coalesce.Call[histAppend, struct{}]
	for i, err := range h.write(ctx, batch, full) {
		if !full[i] && errors.Is(err, redis.Nil) { // NOMKSTREAM: the stream had gone
			again = append(again, batch[i])
			continue
		}
		h.settle(batch[i], err, full[i])
	}
	for i, err := range h.write(ctx, again, nil) {
		h.settle(again[i], err, true)
	}
}

// settle answers c with err; a full append that failed leaves its stream's
// TTL to be renewed by the next append.
func (h *History) settle(c *coalesce.Call[histAppend, struct{}], err error, full bool) {
	if err != nil && full {
		h.forget(HistoryKey(h.prefix, c.Req.task))
	}
	c.Err = err
}

// due reports whether an append to the stream key made at now is to renew
// its TTL (ttlRefresh), and counts it as renewed: a failed append says so
// with forget.
func (h *History) due(key string, now time.Time) bool {
	refresh := min(ttlRefresh, h.ttl/10)
	h.mu.Lock()
	defer h.mu.Unlock()
	if at, ok := h.set[key]; ok && now.Sub(at) < refresh {
		return false
	}
	h.set[key] = now
	return true
}

// forget leaves the renewal of key's TTL to its next append.
func (h *History) forget(key string) {
	h.mu.Lock()
	delete(h.set, key)
	h.mu.Unlock()
}

// write sends batch in one pipeline: history_append.lua (XADD and
// PEXPIRE in one step) where full[i] (everywhere if full is nil), XADD
// NOMKSTREAM elsewhere; nothing for an empty batch. Each append touches
// one key, so a batch of many tasks' appends is one round trip per node
// on Redis Cluster too (a MULTI there cannot span hash slots). It returns
// each append's error: redis.Nil for a NOMKSTREAM append whose stream did
// not exist.
func (h *History) write(ctx context.Context, batch []*coalesce.Call[histAppend, struct{}], full []bool) []error {
	if len(batch) == 0 {
		return nil
	}
	args := make([][]any, len(batch))
	for i, c := range batch {
		args[i] = entryFields(c.Req.e)
	}
	isFull := func(i int) bool { return full == nil || full[i] }
	if full == nil || slices.Contains(full, true) {
		_ = h.loadOnce(ctx, appendScript) // a failure shows as NOSCRIPT, loaded again below
	}
	cmds := make([]redis.Cmder, len(batch))
	send := func(which []int) error {
		p := h.rdb.Pipeline()
		for _, i := range which {
			key := HistoryKey(h.prefix, batch[i].Req.task)
			if isFull(i) {
				cmds[i] = appendScript.EvalSha(ctx, p, []string{key},
					append([]any{h.ttl.Milliseconds(), history.MaxLen}, args[i]...)...)
				continue
			}
			cmds[i] = p.XAdd(ctx, &redis.XAddArgs{
				Stream:     key,
				NoMkStream: true,
				MaxLen:     history.MaxLen,
				Approx:     true,
				Values:     args[i],
			})
		}
		_, err := p.Exec(ctx)
		return err
	}
	all := make([]int, len(batch))
	for i := range all {
		all[i] = i
	}
	execErr := send(all)
	// Redis lost its script cache (a restart, a failover, SCRIPT FLUSH):
	// load the script, then send the refused appends again, by hash. A
	// NOSCRIPT refusal ran nothing, so nothing is appended twice.
	var again []int
	for i, c := range cmds {
		if isFull(i) && isNoScript(c.Err()) {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		if err := appendScript.Load(ctx, h.rdb).Err(); err == nil {
			execErr = send(again)
		}
	}
	// A failed round trip sets every command's error; a command that fails
	// on its own (a foreign key of another type) fails only its append.
	// Exec's error is used only if, unexpectedly, no command carries one.
	errs := make([]error, len(batch))
	blame := execErr != nil && !errors.Is(execErr, redis.Nil) &&
		!slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return c.Err() != nil })
	for i, c := range cmds {
		errs[i] = c.Err()
		if errs[i] == nil && blame {
			errs[i] = execErr
		}
	}
	return errs
}

// entryNames are the fields of a stream entry, in order; complete.lua
// has them too (NAMES). The last two are left out of an entry whose value
// is "": most attempts print nothing, and few are backfilled.
var entryNames = [...]string{"slot", "slot_time", "attempt", "token", "replica", "outcome",
	"started", "duration_ms", "error", "output", "backfilled"}

// entryValues is e's value of each of entryNames.
func entryValues(e history.Entry) [len(entryNames)]any {
	backfilled := ""
	if e.Backfilled {
		backfilled = "1"
	}
	return [...]any{
		e.Slot,
		e.SlotTime.UTC().Format(time.RFC3339),
		strconv.Itoa(e.Attempt),
		strconv.FormatInt(e.Token, 10),
		e.Replica,
		string(e.Outcome), // go-redis writes no named string type
		e.Started.UTC().Format(time.RFC3339Nano),
		strconv.FormatInt(e.Duration.Milliseconds(), 10),
		history.TruncateError(e.Error),
		history.TruncateOutput(e.Output),
		backfilled,
	}
}

// entryFields is e as its stream entry's field, value pairs.
func entryFields(e history.Entry) []any {
	values := entryValues(e)
	fields := make([]any, 0, 2*len(values))
	for i, v := range values {
		if i < len(values)-2 || v != "" {
			fields = append(fields, entryNames[i], v)
		}
	}
	return fields
}

// isNoScript reports whether err is Redis's refusal of an EVALSHA whose
// script it does not have.
func isNoScript(err error) bool {
	return errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT")
}

// Recent implements history.History with history_read.lua (XREVRANGE,
// each entry bounded). Fields that do not parse are left zero: the
// history is for reading, and one odd entry should not hide the others.
func (h *History) Recent(ctx context.Context, task string, n int) ([]history.Entry, error) {
	if n <= 0 {
		return nil, nil
	}
	es, err := h.read(ctx, task, "+", n, 0)
	if err != nil {
		return nil, fmt.Errorf("history: read %s: %w", task, err)
	}
	return es, nil
}

// read is one page of task's stream: up to n entries at or below end,
// newest first, bounded, within budget (0: none).
func (h *History) read(ctx context.Context, task, end string, n, budget int) ([]history.Entry, error) {
	key := HistoryKey(h.prefix, task)
	return decodeReply(readScript.Run(ctx, h.rdb, []string{key}, readArgs(end, n, budget, n)...), key)
}

// decodeReply decodes history_read.lua's reply for the stream key.
func decodeReply(c *redis.Cmd, key string) ([]history.Entry, error) {
	v, err := c.Slice()
	if err != nil {
		return nil, err
	}
	out := make([]history.Entry, 0, len(v))
	for _, item := range v {
		pair, ok := item.([]any)
		if !ok || len(pair) != 2 {
			return out, fmt.Errorf("stream %s: unexpected reply %T", key, item)
		}
		m := redis.XMessage{Values: map[string]any{}}
		m.ID, _ = pair[0].(string)
		kv, _ := pair[1].([]any)
		for i := 0; i+1 < len(kv); i += 2 {
			if k, ok := kv[i].(string); ok {
				m.Values[k] = kv[i+1]
			}
		}
		out = append(out, decodeEntry(m, key))
	}
	return out, nil
}

// Bounds of RecentEach: the entries asked for in one round trip, the
// round trips in flight at once (their replies are decoded in parallel),
// and how many of each task's newest entries come with their output (the
// status shows a slot's last attempt: the newest is the one whose output
// matters; a task's page reads every output).
const (
	statusOutputs    = 1
	readBatchEntries = 4096
	readParallel     = 4
)

// RecentEach returns up to ns[i] of tasks[i]'s entries, newest first, for
// every i (none where ns[i] ≤ 0), and errs[i], the error of tasks[i]'s
// read, if any: one history_read.lua per task, pipelined about
// readBatchEntries entries to a round trip, readParallel round trips at a
// time, so that the status of many tasks costs a few round trips, not one
// per task. A task whose key is not a stream fails alone; a round trip
// that fails fails its tasks.
func (h *History) RecentEach(ctx context.Context, tasks []string, ns []int) (out [][]history.Entry, errs []error) {
	out, errs = make([][]history.Entry, len(tasks)), make([]error, len(tasks))
	type span struct{ from, to int }
	var spans []span
	from, sum := 0, 0
	for i := range tasks {
		if n := max(ns[i], 0); sum+n > readBatchEntries && sum > 0 {
			spans = append(spans, span{from, i})
			from, sum = i, 0
		}
		sum += max(ns[i], 0)
	}
	spans = append(spans, span{from, len(tasks)})
	sem := make(chan struct{}, readParallel)
	var wg sync.WaitGroup
	for _, sp := range spans {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			h.readEach(ctx, tasks[sp.from:sp.to], ns[sp.from:sp.to], out[sp.from:sp.to], errs[sp.from:sp.to])
		}()
	}
	wg.Wait()
	return out, errs
}

// readEach is one round trip of RecentEach, into out and errs. A script
// cache that lost history_read.lua (a restart, SCRIPT FLUSH) costs a
// second one.
func (h *History) readEach(ctx context.Context, tasks []string, ns []int, out [][]history.Entry, errs []error) {
	cmds := make([]*redis.Cmd, len(tasks))
	if err := h.loadOnce(ctx, readScript); err != nil {
		for i := range tasks {
			errs[i] = err
		}
		return
	}
	for try := 0; ; try++ {
		p := h.rdb.Pipeline()
		for i, task := range tasks {
			if ns[i] > 0 {
				cmds[i] = readScript.EvalSha(ctx, p, []string{HistoryKey(h.prefix, task)}, readArgs("+", ns[i], 0, statusOutputs)...)
			}
		}
		if p.Len() == 0 {
			return
		}
		_, _ = p.Exec(ctx) // each command carries its own error
		if try > 0 || !slices.ContainsFunc(cmds, func(c *redis.Cmd) bool {
			return c != nil && isNoScript(c.Err())
		}) {
			break
		}
		if err := readScript.Load(ctx, h.rdb).Err(); err != nil {
			for i := range tasks {
				errs[i] = fmt.Errorf("history: load the read script: %w", err)
			}
			return
		}
	}
	for i, c := range cmds {
		if c == nil {
			continue
		}
		out[i], errs[i] = decodeReply(c, HistoryKey(h.prefix, tasks[i]))
		if errs[i] != nil {
			errs[i] = fmt.Errorf("history: read %s: %w", tasks[i], errs[i])
		}
	}
}

// loadOnce loads s, readScript or appendScript, into the script cache
// unless it did before: the pipelined reads and full appends send
// EVALSHA, which a cache without the script refuses (then they load it
// again).
func (h *History) loadOnce(ctx context.Context, s *redis.Script) error {
	done := &h.loaded[0]
	if s == appendScript {
		done = &h.loaded[1]
	}
	if done.Load() {
		return nil
	}
	h.loadMu.Lock()
	defer h.loadMu.Unlock()
	if done.Load() {
		return nil
	}
	if err := s.Load(ctx, h.rdb).Err(); err != nil {
		return fmt.Errorf("history: load a script: %w", err)
	}
	done.Store(true)
	return nil
}

// RecentBefore returns up to n of task's entries older than the entry
// whose id is before ("": the newest), newest first: one XREVRANGE with
// COUNT (history_read.lua), so a page costs n bounded entries however deep
// it is (it implements
// observe.HistoryPager).
func (h *History) RecentBefore(ctx context.Context, task, before string, n int) ([]history.Entry, error) {
	end := "+"
	if before != "" {
		var ok bool
		if end, ok = previousID(before); !ok {
			return nil, nil // nothing is older than 0-0
		}
	}
	if n <= 0 {
		return nil, nil
	}
	es, err := h.read(ctx, task, end, n, ReadPageBudget)
	if err != nil {
		return nil, fmt.Errorf("history: read %s before %s: %w", task, before, err)
	}
	return es, nil
}

// previousID is the greatest stream id below id ("<ms>-<seq>"), as an
// inclusive XREVRANGE end (the exclusive "(" form needs Redis 6.2); false
// if id is 0-0 or does not parse.
func previousID(id string) (string, bool) {
	a, b, ok := strings.Cut(id, "-")
	ms, err1 := strconv.ParseUint(a, 10, 64)
	seq, err2 := strconv.ParseUint(b, 10, 64)
	switch {
	case !ok || err1 != nil || err2 != nil:
		return "", false
	case seq > 0:
		return a + "-" + strconv.FormatUint(seq-1, 10), true
	case ms > 0:
		return strconv.FormatUint(ms-1, 10) + "-" + strconv.FormatUint(math.MaxUint64, 10), true
	}
	return "", false
}

// decodeEntry decodes entry m of the stream key; an entry that
// history_read.lua cut says so first in its Error, naming the key.
func decodeEntry(m redis.XMessage, key string) history.Entry {
	str := func(k string) string { s, _ := m.Values[k].(string); return s }
	e := history.Entry{
		ID:         m.ID,
		Slot:       str("slot"),
		Replica:    str("replica"),
		Outcome:    history.Outcome(str("outcome")),
		Error:      str("error"),
		Output:     str("output"),
		Backfilled: str("backfilled") == "1",
	}
	e.SlotTime, _ = time.Parse(time.RFC3339, str("slot_time"))
	e.Started, _ = time.Parse(time.RFC3339Nano, str("started"))
	e.Attempt, _ = strconv.Atoi(str("attempt"))
	e.Token, _ = strconv.ParseInt(str("token"), 10, 64)
	ms, _ := strconv.ParseInt(str("duration_ms"), 10, 64)
	e.Duration = time.Duration(ms) * time.Millisecond
	if cut := str("cut"); cut != "" {
		e.Error = history.CutMark(key, m.ID, cut) + e.Error
	}
	e.Error = history.TruncateError(e.Error)
	e.Output = history.TruncateOutput(e.Output)
	return e
}
