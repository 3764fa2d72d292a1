package store

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/internal/etcdtest"
	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/internal/zktest"
	zklock "github.com/slotd/slotd/lock/zookeeper"
	"github.com/slotd/slotd/scheduler"
)

// checkBounded fails unless every entry of es is within the caps of an
// entry slotd writes, and the one planted (its slot "planted") says first
// in its Error that it was cut, naming key and, in want, what.
func checkBounded(t *testing.T, es []scheduler.HistoryEntry, key string, want ...string) {
	t.Helper()
	found := false
	for _, e := range es {
		if len(e.Output) > scheduler.MaxHistoryOutput || len(e.Error) > scheduler.MaxHistoryError || len(e.Slot) > readValueCap {
			t.Errorf("entry %s read back with %d bytes of output, %d of error, %d of slot: over the caps", e.ID, len(e.Output), len(e.Error), len(e.Slot))
		}
		if !strings.HasPrefix(e.Slot, "planted") && !strings.HasPrefix(e.Error, "[history entry") {
			continue
		}
		found = true
		if !strings.HasPrefix(e.Error, "[history entry "+e.ID+" of "+key+" cut on read: ") {
			t.Errorf("the planted entry's error = %.200q, want it to start with the cut mark naming %s and entry %s", e.Error, key, e.ID)
		}
		for _, w := range want {
			if !strings.Contains(e.Error, w) {
				t.Errorf("the planted entry's error = %.300q, want it to say %q", e.Error, w)
			}
		}
	}
	if !found {
		t.Errorf("the planted entry was not read back: %d entries", len(es))
	}
}

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
	h := NewRedisHistory(rdb, "slotd", time.Hour)
	defer h.Close()
	if err := h.Append(ctx, "t", scheduler.HistoryEntry{Slot: "s1", Attempt: 1, Outcome: "success", Output: "fine"}); err != nil {
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
	if err := h.Append(ctx, "t", scheduler.HistoryEntry{Slot: "s3", Attempt: 1, Outcome: "success"}); err != nil {
		t.Fatal(err)
	}
	want := []string{"output of 52428800 bytes", "error of 3145728 bytes", "slot of 2007 bytes", "190 fields"}
	var es []scheduler.HistoryEntry
	var err error
	n := allocated(func() { es, err = h.Recent(ctx, "t", 10) })
	if err != nil || len(es) != 3 {
		t.Fatalf("Recent = %d entries, %v; want 3", len(es), err)
	}
	checkBounded(t, es, key, want...)
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
	checkBounded(t, page, key, want...)
	each, errs := h.RecentEach(ctx, []string{"t"}, []int{10})
	if errs[0] != nil || len(each) != 1 {
		t.Fatalf("RecentEach = %v, %v", each, errs)
	}
	// The status's read keeps the output of the newest entry alone.
	checkBounded(t, each[0], key, "error of 3145728 bytes", "slot of 2007 bytes")
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

// The memory history bounds an entry when it is appended, so that it
// reads back within the caps however large the attempt's output was.
func TestMemoryHistoryBoundsEntries(t *testing.T) {
	ctx := context.Background()
	h := scheduler.NewMemoryHistory(0)
	if err := h.Append(ctx, "t", scheduler.HistoryEntry{Slot: "s", Error: strings.Repeat("e", 3<<20), Output: strings.Repeat("o", 50<<20)}); err != nil {
		t.Fatal(err)
	}
	es, err := h.RecentBefore(ctx, "t", "", 5)
	if err != nil || len(es) != 1 || len(es[0].Output) > scheduler.MaxHistoryOutput || len(es[0].Error) > scheduler.MaxHistoryError {
		t.Fatalf("read back %d entries, %v; want 1 within the caps", len(es), err)
	}
}

// On etcd, a planted value over maxRawEntry is not decoded (it reads as an
// entry that says so, naming its key), and one under it with fields over
// the caps is cut with the mark.
func TestEtcdHistoryCutsPlantedEntry(t *testing.T) {
	c := etcdtest.Start(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, err := Open(ctx, parseEtcd(t, fmt.Sprintf("[etcd]\nendpoints = [%q]\n", c.Endpoints()[0])), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	h := b.History.(*EtcdHistory)
	cli := h.s.Client()
	p := EtcdHistoryPrefix("slotd", "t")
	big := p + fmt.Sprintf("%020d-00000001", time.Now().Add(-2*time.Second).UnixNano())
	if _, err := cli.Put(ctx, big, strings.Repeat("x", maxRawEntry+1)); err != nil {
		t.Fatal(err)
	}
	cut, _ := json.Marshal(scheduler.HistoryEntry{Slot: "planted", Output: strings.Repeat("o", 200<<10), Error: strings.Repeat("e", 8<<10)})
	wide := p + fmt.Sprintf("%020d-00000002", time.Now().Add(-time.Second).UnixNano())
	if _, err := cli.Put(ctx, wide, string(cut)); err != nil {
		t.Fatal(err)
	}
	es, err := h.Recent(ctx, "t", 5)
	if err != nil || len(es) != 2 {
		t.Fatalf("Recent = %d entries, %v", len(es), err)
	}
	checkBounded(t, es[:1], wide, "output of 204800 bytes", "error of 8192 bytes")
	checkBounded(t, es[1:], big, fmt.Sprintf("%d bytes, over the cap of %d: not read", maxRawEntry+1, maxRawEntry))
	page, err := h.RecentBefore(ctx, "t", es[0].ID, 5)
	if err != nil || len(page) != 1 || page[0].ID != es[1].ID {
		t.Fatalf("RecentBefore %s = %+v, %v; want the older entry alone", es[0].ID, page, err)
	}
}

// On ZooKeeper, likewise; ids are "<unix ms>-<sequence>" and page.
func TestZooKeeperHistoryCutsPlantedEntry(t *testing.T) {
	e := zktest.Start(t, 1)
	ctx := context.Background()
	s, err := zklock.Dial(ctx, zklock.Options{Servers: e.Servers(), SessionTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	h := NewZooKeeperHistory(s, time.Hour)
	if err := h.Append(ctx, "t", scheduler.HistoryEntry{Slot: "s1"}); err != nil {
		t.Fatal(err)
	}
	dir := h.dir("t")
	planted := func(b []byte) string {
		p, err := s.Conn().CreateTTL(dir+"/e-", b, zk.FlagPersistentSequentialWithTTL, s.ACL(), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	big := planted([]byte(strings.Repeat("x", maxRawEntry+1)))
	cut, _ := json.Marshal(scheduler.HistoryEntry{Slot: "planted", Output: strings.Repeat("o", 200<<10)})
	wide := planted(cut)
	es, err := h.Recent(ctx, "t", 5)
	if err != nil || len(es) != 3 {
		t.Fatalf("Recent = %d entries, %v", len(es), err)
	}
	checkBounded(t, es[:1], wide, "output of 204800 bytes")
	checkBounded(t, es[1:2], big, "not read")
	page, err := h.RecentBefore(ctx, "t", es[1].ID, 5)
	if err != nil || len(page) != 1 || page[0].Slot != "s1" {
		t.Fatalf("RecentBefore %s = %+v, %v; want s1 alone", es[1].ID, page, err)
	}
}
