package etcdlock

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/slotd/slotd/internal/etcdtest"
	"github.com/slotd/slotd/scheduler/history"
	"github.com/slotd/slotd/scheduler/history/historytest"
)

// newHistory returns the history Open gives beside a store on c, under
// "slotd", each entry living an hour.
func newHistory(t *testing.T, c *etcdtest.Cluster) *History {
	t.Helper()
	s, h, err := Open(Config{Endpoints: c.Endpoints(), Prefix: "slotd", HistoryTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return h
}

// The history keeps about its bound of entries per task, newest first,
// each bounded, and every entry has the history's TTL.
func TestHistoryKeepsItsBound(t *testing.T) {
	c := etcdtest.Start(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	h := newHistory(t, c)
	h.maxLen = 10
	for i := 1; i <= 2*etcdTrimEvery; i++ {
		if err := h.Append(ctx, "t", history.Entry{Slot: "s", Attempt: i, Outcome: "success", Error: strings.Repeat("x", 2*history.MaxError)}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := h.Recent(ctx, "t", 5)
	if err != nil || len(got) != 5 {
		t.Fatalf("Recent = %d entries, %v", len(got), err)
	}
	for i, e := range got {
		if e.Attempt != 2*etcdTrimEvery-i || e.ID == "" || len(e.Error) > history.MaxError {
			t.Errorf("entry %d = attempt %d id %q error %d bytes; want attempt %d, newest first", i, e.Attempt, e.ID, len(e.Error), 2*etcdTrimEvery-i)
		}
	}
	cli := h.s.cli
	resp, err := cli.Get(ctx, HistoryPrefix("slotd", "t"), clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if n := len(resp.Kvs); n < h.maxLen || n > h.maxLen+etcdTrimEvery {
		t.Errorf("%d entries kept, want about %d", n, h.maxLen)
	}
	for _, kv := range resp.Kvs {
		ttl, err := cli.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
		if err != nil || time.Duration(ttl.TTL)*time.Second < h.ttl-time.Minute {
			t.Fatalf("entry %s: lease TTL %v, %v; want the history TTL", kv.Key, ttl, err)
		}
	}
}

// On etcd, a planted value over history.MaxJSON is not decoded (it reads as an
// entry that says so, naming its key), and one under it with fields over
// the caps is cut with the mark.
func TestHistoryCutsPlantedEntry(t *testing.T) {
	c := etcdtest.Start(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	h := newHistory(t, c)
	cli := h.s.cli
	p := HistoryPrefix("slotd", "t")
	big := p + fmt.Sprintf("%020d-00000001", time.Now().Add(-2*time.Second).UnixNano())
	if _, err := cli.Put(ctx, big, strings.Repeat("x", history.MaxJSON+1)); err != nil {
		t.Fatal(err)
	}
	cut, _ := json.Marshal(history.Entry{Slot: "planted", Output: strings.Repeat("o", 200<<10), Error: strings.Repeat("e", 8<<10)})
	wide := p + fmt.Sprintf("%020d-00000002", time.Now().Add(-time.Second).UnixNano())
	if _, err := cli.Put(ctx, wide, string(cut)); err != nil {
		t.Fatal(err)
	}
	es, err := h.Recent(ctx, "t", 5)
	if err != nil || len(es) != 2 {
		t.Fatalf("Recent = %d entries, %v", len(es), err)
	}
	historytest.CheckBounded(t, es[:1], wide, "output of 204800 bytes", "error of 8192 bytes")
	historytest.CheckBounded(t, es[1:], big, fmt.Sprintf("%d bytes, over the cap of %d: not read", history.MaxJSON+1, history.MaxJSON))
	page, err := h.RecentBefore(ctx, "t", es[0].ID, 5)
	if err != nil || len(page) != 1 || page[0].ID != es[1].ID {
		t.Fatalf("RecentBefore %s = %+v, %v; want the older entry alone", es[0].ID, page, err)
	}
}
