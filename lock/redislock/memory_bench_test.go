package redislock_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/redislock"
	"github.com/slotd/slotd/scheduler/history"
)

// BenchmarkRedisBytesPerDoneSlot prices, in Redis's memory, what a slot
// leaves behind after its success until done_ttl: the done marker and the
// attempts counter, for a task named like a real one with second-resolution
// slot ids (a task due every second). The history stream is apart: it is
// capped per task, whatever the slot rate. docs/stores.md's sizing
// formula takes its figure from
//
//	go test -run '^$' -bench 'BytesPerDoneSlot' -benchtime 20000x ./lock/redislock/
func BenchmarkRedisBytesPerDoneSlot(b *testing.B) {
	rdb, r, p := benchEnv(b)
	ctx := context.Background()
	p.DoneTTL = 48 * time.Hour
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	before := usedMemory(b, rdb)
	b.ResetTimer()
	for i := range b.N {
		at := base.Add(-time.Duration(i) * time.Second)
		slot := lock.Slot{Task: "nightly-report", ID: at.UTC().Format("20060102150405"), Time: at, Deadline: base.Add(2 * time.Hour)}
		c, err := r.Claim(ctx, slot, "replica-1#0123456789ab", p)
		if err != nil || c.Result != lock.Won {
			b.Fatalf("claim %s: %v %v", slot.ID, c.Result, err)
		}
		if err := r.Complete(ctx, slot, lock.Owner{ID: "replica-1#0123456789ab", Attempt: c.Attempt}, p.DoneTTL); err != nil {
			b.Fatalf("complete %s: %v", slot.ID, err)
		}
	}
	b.StopTimer()
	if n, err := rdb.DBSize(ctx).Result(); err != nil || n < int64(b.N) {
		b.Fatalf("DBSIZE %d (%v): want a key or more per slot", n, err)
	}
	b.ReportMetric(float64(usedMemory(b, rdb)-before)/float64(b.N), "B/slot")
}

// BenchmarkRedisBytesOneSecondTask is what one task due every second
// holds in Redis at the defaults, in steady state: its done markers and
// counters for the default done_ttl (10,000 slots for a task that dense:
// internal/config's DefaultDoneMarkers), and its history stream, capped at
// history.MaxLen entries, each appended by its slot's completion as the
// daemon does on one server (Open, History.CompleteRecorded). Run with
// that many slots:
//
//	go test -run '^$' -bench 'BytesOneSecondTask' -benchtime 10000x ./lock/redislock/
func BenchmarkRedisBytesOneSecondTask(b *testing.B) {
	srv := redistest.Start(b)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	b.Cleanup(func() { rdb.Close() })
	r, h := redislock.Open(rdb, redislock.Config{Prefix: "slotd", HistoryTTL: 7 * 24 * time.Hour})
	b.Cleanup(func() { h.Close(); r.Close() })
	ctx := context.Background()
	p := lock.Policy{Lease: 15 * time.Second, DoneTTL: 10_000 * time.Second, MaxAttempts: 3}
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	owner := "replica-1#0123456789ab"
	before := usedMemory(b, rdb)
	b.ResetTimer()
	for i := range b.N {
		at := base.Add(-time.Duration(i) * time.Second)
		slot := lock.Slot{Task: "every-second", ID: at.UTC().Format("20060102150405"), Time: at, Deadline: base.Add(2 * time.Hour)}
		c, err := r.Claim(ctx, slot, owner, p)
		if err != nil || c.Result != lock.Won {
			b.Fatalf("claim %s: %v %v", slot.ID, c.Result, err)
		}
		e := history.Entry{Slot: slot.ID, SlotTime: at, Attempt: c.Attempt, Token: lock.Token(at, c.Attempt),
			Replica: "replica-1", Outcome: "success", Started: at.Add(3 * time.Millisecond), Duration: time.Millisecond}
		recorded, err := h.CompleteRecorded(ctx, r, slot, lock.Owner{ID: owner, Attempt: c.Attempt}, p.DoneTTL, e)
		if err != nil || !recorded {
			b.Fatalf("complete %s: recorded %v, %v", slot.ID, recorded, err)
		}
	}
	b.StopTimer()
	n, err := rdb.XLen(ctx, redislock.HistoryKey("slotd", "every-second")).Result()
	if err != nil || n == 0 || n > int64(b.N) {
		b.Fatalf("XLEN %d (%v): want the entries, capped", n, err)
	}
	used := float64(usedMemory(b, rdb) - before)
	b.ReportMetric(used/float64(b.N), "B/slot")
	b.ReportMetric(used/1e6, "MB")
	b.ReportMetric(float64(n), "entries")
}

// usedMemory is the server's used_memory (INFO memory).
func usedMemory(b *testing.B, rdb *redis.Client) int64 {
	b.Helper()
	info, err := rdb.Info(context.Background(), "memory").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				b.Fatalf("INFO memory: %q: %v", line, err)
			}
			return n
		}
	}
	b.Fatal("INFO memory: no used_memory")
	return 0
}
