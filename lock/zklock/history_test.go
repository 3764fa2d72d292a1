package zklock_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/slotd/slotd/internal/zktest"
	zklock "github.com/slotd/slotd/lock/zklock"
	"github.com/slotd/slotd/scheduler/history"
	"github.com/slotd/slotd/scheduler/history/historytest"
)

// A task's history keeps about history.MaxLen entries.
func TestHistoryBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("appends a thousand entries")
	}
	e := zktest.Start(t, 1)
	ctx := context.Background()
	s, err := zklock.Dial(ctx, zklock.Options{Servers: e.Servers(), SessionTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	h := zklock.NewHistory(s, time.Hour)
	n := history.MaxLen + 64 + 1
	for i := range n {
		if err := h.Append(ctx, "t", history.Entry{Slot: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	kids, _, err := s.Conn().Children(s.Root() + "/.history/t")
	if err != nil {
		t.Fatal(err)
	}
	if len(kids) > history.MaxLen+historySlack || len(kids) < history.MaxLen {
		t.Fatalf("%d entries after %d appends, want about %d", len(kids), n, history.MaxLen)
	}
	got, err := h.Recent(ctx, "t", 1)
	if err != nil || len(got) != 1 || got[0].Slot != fmt.Sprint(n-1) {
		t.Fatalf("newest = %+v, %v", got, err)
	}
}

const historySlack = 64

// On ZooKeeper, likewise; ids are "<unix ms>-<sequence>" and page.
func TestHistoryCutsPlantedEntry(t *testing.T) {
	e := zktest.Start(t, 1)
	ctx := context.Background()
	s, err := zklock.Dial(ctx, zklock.Options{Servers: e.Servers(), SessionTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	h := zklock.NewHistory(s, time.Hour)
	if err := h.Append(ctx, "t", history.Entry{Slot: "s1"}); err != nil {
		t.Fatal(err)
	}
	dir := s.Root() + "/.history/t"
	planted := func(b []byte) string {
		p, err := s.Conn().CreateTTL(dir+"/e-", b, zk.FlagPersistentSequentialWithTTL, s.ACL(), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	big := planted([]byte(strings.Repeat("x", history.MaxJSON+1)))
	cut, _ := json.Marshal(history.Entry{Slot: "planted", Output: strings.Repeat("o", 200<<10)})
	wide := planted(cut)
	es, err := h.Recent(ctx, "t", 5)
	if err != nil || len(es) != 3 {
		t.Fatalf("Recent = %d entries, %v", len(es), err)
	}
	historytest.CheckBounded(t, es[:1], wide, "output of 204800 bytes")
	historytest.CheckBounded(t, es[1:2], big, "not read")
	page, err := h.RecentBefore(ctx, "t", es[1].ID, 5)
	if err != nil || len(page) != 1 || page[0].Slot != "s1" {
		t.Fatalf("RecentBefore %s = %+v, %v; want s1 alone", es[1].ID, page, err)
	}
}
