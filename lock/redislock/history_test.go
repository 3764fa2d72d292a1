package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/redislock"
	"github.com/slotd/slotd/scheduler/history"
)

// histories returns both implementations, the Redis one on a fresh server.
func histories(t *testing.T) map[string]history.History {
	srv := redistest.Start(t)
	a, b := redistest.Start(t), redistest.Start(t)
	return map[string]history.History{
		"memory": history.NewMemory(0),
		"redis":  redislock.NewHistory(srv.Client(), "slotd", time.Hour),
		"multi": redislock.NewMultiHistory(redislock.NewHistory(a.Client(), "slotd", time.Hour),
			redislock.NewHistory(b.Client(), "slotd", time.Hour)),
	}
}

// A MultiHistory (Redlock mode: one stream per node) reads the union of
// what its stores hold, once each, newest first, while any of them
// answers, and takes appends while any of them does.
func TestMultiHistoryMergesAndSurvives(t *testing.T) {
	ctx := context.Background()
	a, b := redistest.Start(t), redistest.Start(t)
	ha := redislock.NewHistory(a.Client(), "slotd", time.Hour)
	hb := redislock.NewHistory(b.Client(), "slotd", time.Hour)
	m := redislock.NewMultiHistory(ha, hb)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(m.Append(ctx, "job", entry("s", 1, "failure", "x")))
	must(ha.Append(ctx, "job", entry("s", 2, "failure", "y"))) // b was down
	must(hb.Append(ctx, "job", entry("s", 3, "success", "")))  // a was down
	attempts := func(es []history.Entry) (out []int) {
		for _, e := range es {
			out = append(out, e.Attempt)
		}
		return out
	}
	got, err := m.Recent(ctx, "job", 10)
	if err != nil || fmt.Sprint(attempts(got)) != "[3 2 1]" {
		t.Fatalf("merged = %v, %v; want attempts [3 2 1], each once", attempts(got), err)
	}
	if got, _ := m.Recent(ctx, "job", 2); fmt.Sprint(attempts(got)) != "[3 2]" {
		t.Fatalf("newest 2 = %v, want [3 2]", attempts(got))
	}
	b.Stop()
	must(m.Append(ctx, "job", entry("s", 4, "success", "")))
	if got, err := m.Recent(ctx, "job", 10); err != nil || fmt.Sprint(attempts(got)) != "[4 2 1]" {
		t.Fatalf("with b down = %v, %v; want [4 2 1] from a", attempts(got), err)
	}
	a.Stop()
	if err := m.Append(ctx, "job", entry("s", 5, "success", "")); err == nil {
		t.Fatal("append with every store down: want an error")
	}
	if _, err := m.Recent(ctx, "job", 10); err == nil {
		t.Fatal("read with every store down: want an error")
	}
}

func entry(slot string, attempt int, outcome, errText string) history.Entry {
	at := time.Date(2024, 1, 15, 14, 0, 0, 0, time.UTC)
	return history.Entry{
		Slot: slot, SlotTime: at, Attempt: attempt, Token: lock.Token(at, attempt),
		Replica: "r1", Outcome: history.Outcome(outcome),
		Started:  at.Add(time.Duration(attempt)*time.Second + 123456789*time.Nanosecond),
		Duration: 1500 * time.Millisecond, Error: errText,
	}
}

// Recent returns the latest entries newest first, with every field as it
// was appended, and nothing for another task.
func TestHistoryAppendRecent(t *testing.T) {
	for name, h := range histories(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			want := []history.Entry{
				entry("2024011514", 1, "failure", "tasks: exec: exit status 1"),
				entry("2024011514", 2, "timeout", "scheduler: task timed out"),
				entry("2024011514", 3, "success", ""),
			}
			for _, e := range want {
				if err := h.Append(ctx, "report", e); err != nil {
					t.Fatal(err)
				}
			}
			if err := h.Append(ctx, "other", entry("2024011515", 1, "success", "")); err != nil {
				t.Fatal(err)
			}
			got, err := h.Recent(ctx, "report", 2)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 2 {
				t.Fatalf("Recent(2) returned %d entries: %+v", len(got), got)
			}
			for i, g := range got {
				w := want[len(want)-1-i]
				if g.ID == "" {
					t.Errorf("entry %d has no id", i)
				}
				g.ID = ""
				if !g.SlotTime.Equal(w.SlotTime) || !g.Started.Equal(w.Started) {
					t.Errorf("entry %d times: got %v / %v, want %v / %v", i, g.SlotTime, g.Started, w.SlotTime, w.Started)
				}
				g.SlotTime, g.Started, w.SlotTime, w.Started = time.Time{}, time.Time{}, time.Time{}, time.Time{}
				if g != w {
					t.Errorf("entry %d:\n got %+v\nwant %+v", i, g, w)
				}
			}
			if got[0].ID <= got[1].ID && len(got[0].ID) == len(got[1].ID) {
				t.Errorf("ids not newest first: %s then %s", got[0].ID, got[1].ID)
			}
			all, _ := h.Recent(ctx, "report", 100)
			if len(all) != 3 {
				t.Errorf("Recent(100) returned %d entries, want 3", len(all))
			}
			if none, err := h.Recent(ctx, "nosuchtask", 10); err != nil || len(none) != 0 {
				t.Errorf("Recent of a task without history: %v, %v", none, err)
			}
			if none, _ := h.Recent(ctx, "report", 0); len(none) != 0 {
				t.Errorf("Recent(0) returned %d entries", len(none))
			}
		})
	}
}

// An error is stored as valid UTF-8 of at most 1 KiB, cut at a rune.
func TestHistoryErrorTruncated(t *testing.T) {
	long := strings.Repeat("é", 300) + "\xff\xfe" + strings.Repeat("x", 5000)
	for name, h := range histories(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			if err := h.Append(ctx, "report", entry("2024011514", 1, "failure", long)); err != nil {
				t.Fatal(err)
			}
			got, err := h.Recent(ctx, "report", 1)
			if err != nil || len(got) != 1 {
				t.Fatalf("Recent: %v, %v", got, err)
			}
			e := got[0].Error
			if len(e) > history.MaxError || !utf8.ValidString(e) {
				t.Errorf("error is %d bytes, valid UTF-8 %v; want <= %d and valid", len(e), utf8.ValidString(e), history.MaxError)
			}
			if !strings.HasPrefix(e, strings.Repeat("é", 300)) || !strings.HasSuffix(e, "…") {
				t.Errorf("error not cut at its end with a mark: %q...%q", e[:20], e[len(e)-20:])
			}
		})
	}
}

// The Redis stream has a TTL after every append, and is capped near
// history.MaxLen.
func TestRedisHistoryTTLAndCap(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	h := redislock.NewHistory(rdb, "pfx", 7*24*time.Hour)
	ctx := context.Background()
	key := redislock.HistoryKey("pfx", "report")
	if key != "pfx:history:{report}" {
		t.Errorf("HistoryKey = %q", key)
	}
	const n = history.MaxLen + 300
	for i := range n {
		if err := h.Append(ctx, "report", entry("2024011514", i%999+1, "success", "")); err != nil {
			t.Fatal(err)
		}
	}
	ttl, err := rdb.PTTL(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	if ttl <= 7*24*time.Hour-time.Minute || ttl > 7*24*time.Hour {
		t.Errorf("PTTL of %s = %v, want about 168h", key, ttl)
	}
	l, err := rdb.XLen(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	// MAXLEN ~ trims whole stream nodes (100 entries by default).
	if l < history.MaxLen || l >= n {
		t.Errorf("XLEN %s = %d after %d appends, want %d..%d", key, l, n, history.MaxLen, n-1)
	}
}

// Appends between two TTL renewals add with NOMKSTREAM; a stream that has
// gone in between (deleted here; expired or evicted in life) is made again
// with its TTL, never without one, and a key of another type fails the
// append without being overwritten.
func TestRedisHistoryStreamGoneBetweenRenewals(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	h := redislock.NewHistory(rdb, "pfx", 7*24*time.Hour)
	ctx := context.Background()
	key := redislock.HistoryKey("pfx", "report")
	if err := h.Append(ctx, "report", entry("2024011514", 1, "success", "")); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	if err := h.Append(ctx, "report", entry("2024011515", 1, "success", "")); err != nil {
		t.Fatal(err)
	}
	if ttl := rdb.PTTL(ctx, key).Val(); ttl <= 7*24*time.Hour-time.Minute {
		t.Errorf("PTTL of the stream made again = %v, want about 168h", ttl)
	}
	got, err := h.Recent(ctx, "report", 10)
	if err != nil || len(got) != 1 || got[0].Slot != "2024011515" {
		t.Fatalf("Recent after the stream was made again = %+v, %v; want the one later entry", got, err)
	}

	if err := rdb.Set(ctx, key, "foreign", 0).Err(); err != nil {
		t.Fatal(err)
	}
	err = h.Append(ctx, "report", entry("2024011516", 1, "success", ""))
	if err == nil || !strings.Contains(err.Error(), "report") {
		t.Fatalf("append onto a foreign key: err = %v, want one naming the task", err)
	}
	if v := rdb.Get(ctx, key).Val(); v != "foreign" {
		t.Fatalf("foreign key = %q after a failed append, want it untouched", v)
	}
	if err := rdb.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	if err := h.Append(ctx, "report", entry("2024011517", 1, "success", "")); err != nil {
		t.Fatal(err)
	}
	if ttl := rdb.PTTL(ctx, key).Val(); ttl <= 0 {
		t.Errorf("PTTL after the foreign key went = %v, want the history TTL", ttl)
	}
}

// RecentEach reads many tasks' latest entries at once, newest first, up to
// each one's count (none for a count of 0), and fails the task whose
// stream is not one alone, naming it.
func TestRedisHistoryRecentEach(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	h := redislock.NewHistory(srv.Client(), "slotd", time.Hour)
	defer h.Close()
	for k := 1; k <= 3; k++ {
		for _, task := range []string{"a", "b"} {
			if err := h.Append(ctx, task, entry(task, k, "success", "")); err != nil {
				t.Fatal(err)
			}
		}
	}
	got, errs := h.RecentEach(ctx, []string{"a", "b", "none", "a"}, []int{2, 5, 3, 0})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	var sizes []int
	for _, es := range got {
		sizes = append(sizes, len(es))
	}
	if fmt.Sprint(sizes) != "[2 3 0 0]" || got[0][0].Attempt != 3 || got[1][2].Attempt != 1 {
		t.Errorf("RecentEach: sizes %v, %+v", sizes, got)
	}
	// Counts beyond one round trip's share split the reads, in order.
	var many []string
	var counts []int
	for i := range 12 {
		many, counts = append(many, []string{"a", "b", "none"}[i%3]), append(counts, 1000)
	}
	got, errs = h.RecentEach(ctx, many, counts)
	if err := errors.Join(errs...); err != nil || len(got) != 12 {
		t.Fatalf("RecentEach of 12 × 1000: %d, %v", len(got), err)
	}
	for i, es := range got {
		if want := []int{3, 3, 0}[i%3]; len(es) != want {
			t.Errorf("RecentEach of 12 × 1000: task %d (%s) has %d entries, want %d", i, many[i], len(es), want)
		}
	}
	if err := srv.Client().Set(ctx, redislock.HistoryKey("slotd", "odd"), "x", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	got, errs = h.RecentEach(ctx, []string{"a", "odd"}, []int{1, 1})
	if errs[1] == nil || !strings.Contains(errs[1].Error(), "odd") || errs[0] != nil || len(got[0]) != 1 {
		t.Errorf("RecentEach over a key that is not a stream: errors %v, a's entries %d; want odd's error alone", errs, len(got[0]))
	}
}

// An entry's output is kept as appended (hostile content included: it is
// escaped where shown, not here), bounded to history.MaxOutput by its tail;
// an entry without output has none.
func TestHistoryOutput(t *testing.T) {
	hostile := "line 1\n<script>alert(1)</script>\x1b[31mred\x1b[0m\r\n"
	huge := strings.Repeat("y", 2*history.MaxOutput) + "tail"
	for name, h := range histories(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			for i, out := range []string{hostile, huge, ""} {
				e := entry("2024011514", i+1, "failure", "exit status 1")
				e.Output = out
				if err := h.Append(ctx, "report", e); err != nil {
					t.Fatal(err)
				}
			}
			got, err := h.Recent(ctx, "report", 3)
			if err != nil || len(got) != 3 {
				t.Fatalf("Recent: %v, %v", got, err)
			}
			if got[2].Output != hostile {
				t.Errorf("output %q, want %q", got[2].Output, hostile)
			}
			if o := got[1].Output; len(o) > history.MaxOutput || !strings.HasPrefix(o, "…y") ||
				!strings.HasSuffix(o, "ytail") || !utf8.ValidString(o) {
				t.Errorf("a %d-byte output is kept as %d bytes", len(huge), len(o))
			}
			if got[0].Output != "" {
				t.Errorf("no output read back as %q", got[0].Output)
			}
		})
	}
}

// Closing a MultiHistory closes every node's history: an append made
// before is on every node, and one made after fails on every node.
func TestMultiHistoryCloseClosesEveryNode(t *testing.T) {
	a, b := redistest.Start(t), redistest.Start(t)
	ctx := context.Background()
	m := redislock.NewMultiHistory(redislock.NewHistory(a.Client(), "slotd", time.Hour),
		redislock.NewHistory(b.Client(), "slotd", time.Hour))
	if err := m.Append(ctx, "t", entry("2024011514", 1, "success", "")); err != nil {
		t.Fatal(err)
	}
	m.Close()
	for i, srv := range []*redistest.Server{a, b} {
		if n, err := srv.Client().XLen(ctx, redislock.HistoryKey("slotd", "t")).Result(); err != nil || n != 1 {
			t.Errorf("node %d holds %d entries, %v; want the one appended before Close", i, n, err)
		}
	}
	if err := m.Append(ctx, "t", entry("2024011514", 2, "success", "")); err == nil {
		t.Error("an append after Close succeeded")
	}
}
