package redislock

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/scheduler/history"
	"github.com/slotd/slotd/scheduler/history/historytest"
)

// allocated runs f and returns the bytes the process allocated meanwhile.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// An entry planted in a history stream — 50 MB of output, 3 MB of error,
// a 2 KB slot, 200 extra fields and one with a 1 KB name — is cut before
// it leaves Redis, on every read (Recent, RecentBefore, RecentEach, which
// leaves out the output of all but the newest entry): it
// reads back within the caps with a mark naming the key, and reading it
// allocates a few MB, not 50.
func TestRedisHistoryCutsPlantedEntry(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	ctx := context.Background()
	h := NewHistory(rdb, "slotd", time.Hour)
	defer h.Close()
	if err := h.Append(ctx, "t", history.Entry{Slot: "s1", Attempt: 1, Outcome: "success", Output: "fine"}); err != nil {
		t.Fatal(err)
	}
	key := HistoryKey("slotd", "t")
	values := []any{"slot", "planted" + strings.Repeat("s", 2000), "attempt", "2", "outcome", "failure",
		"error", strings.Repeat("e", 3<<20), "output", strings.Repeat("o", 50<<20), strings.Repeat("n", 1000), "x"}
	for i := range 200 {
		values = append(values, fmt.Sprintf("extra%d", i), "v")
	}
	if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: key, Values: values}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := h.Append(ctx, "t", history.Entry{Slot: "s3", Attempt: 1, Outcome: "success"}); err != nil {
		t.Fatal(err)
	}
	want := []string{"output of 52428800 bytes", "error of 3145728 bytes", "slot of 2007 bytes", "190 fields"}
	var es []history.Entry
	var err error
	n := allocated(func() { es, err = h.Recent(ctx, "t", 10) })
	if err != nil || len(es) != 3 {
		t.Fatalf("Recent = %d entries, %v; want 3", len(es), err)
	}
	historytest.CheckBounded(t, es, key, want...)
	t.Logf("Recent of 3 entries, one planted with 53 MB: %.1f MB allocated", float64(n)/(1<<20))
	if n > 16<<20 {
		t.Errorf("Recent allocated %d bytes reading a planted 53 MB entry, want at most 16 MiB", n)
	}
	if es[2].Output != "fine" || es[2].Error != "" || es[0].Slot != "s3" {
		t.Errorf("the entries around the planted one read %+v and %+v", es[0], es[2])
	}
	page, err := h.RecentBefore(ctx, "t", es[0].ID, 1)
	if err != nil || len(page) != 1 {
		t.Fatalf("RecentBefore = %d entries, %v", len(page), err)
	}
	historytest.CheckBounded(t, page, key, want...)
	each, errs := h.RecentEach(ctx, []string{"t"}, []int{10})
	if errs[0] != nil || len(each) != 1 {
		t.Fatalf("RecentEach = %v, %v", each, errs)
	}
	// The status's read keeps the output of the newest entry alone.
	historytest.CheckBounded(t, each[0], key, "error of 3145728 bytes", "slot of 2007 bytes")
	if each[0][1].Output != "" || each[0][2].Output != "" {
		t.Errorf("RecentEach kept the output of entries other than the newest")
	}

	// A script cache emptied meanwhile (a restart, SCRIPT FLUSH) costs a
	// reload, not the read.
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if each, errs := h.RecentEach(ctx, []string{"t"}, []int{10}); errs[0] != nil || len(each[0]) != 3 {
		t.Fatalf("RecentEach after SCRIPT FLUSH = %v, %v", each, errs)
	}
}
