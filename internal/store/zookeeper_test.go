package store_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/config"
	"github.com/slotd/slotd/internal/store"
	"github.com/slotd/slotd/internal/zktest"
	"github.com/slotd/slotd/lock"
	zklock "github.com/slotd/slotd/lock/zklock"
	"github.com/slotd/slotd/scheduler"
)

// [zookeeper] opens the ZooKeeper store, and the history lives beside the
// slots, newest first and bounded per task.
func TestOpenZooKeeper(t *testing.T) {
	e := zktest.Start(t, 1)
	src := fmt.Sprintf("[zookeeper]\nservers = [%q]\nroot = \"/opened\"\n[[task]]\nname = \"report\"\nschedule = \"* * * * *\"\nplugin = \"exec\"\nlease = \"2s\"\nparams = { command = [\"true\"] }\n", e.Servers()[0])
	cfg, err := config.Parse([]byte(src), "test.toml", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	b, err := store.Open(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	zs, ok := b.Store.(*zklock.Store)
	if !ok || zs.Root() != "/opened" || zs.SessionTimeout() != 2*time.Second {
		t.Fatalf("store = %T %+v", b.Store, b.Store)
	}
	if z := store.Zero(cfg); reflect.TypeOf(z) != reflect.TypeOf(b.Store) {
		t.Errorf("Zero is a %T, Open returned a %T", z, b.Store)
	}
	now, err := b.Store.Time(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slot := lock.Slot{Task: "report", ID: "1", Time: now.Add(-time.Second), Deadline: now.Add(time.Minute)}
	task := cfg.Tasks[0]
	c, err := b.Store.Claim(ctx, slot, "r", lock.Policy{Lease: task.Lease, DoneTTL: task.DoneTTL, MaxAttempts: task.MaxAttempts})
	if err != nil || c.Result != lock.Won || c.Revision == 0 {
		t.Fatalf("claim = %+v, %v; want won with a revision", c, err)
	}

	for i := range 3 {
		if err := b.History.Append(ctx, "report", scheduler.HistoryEntry{Slot: fmt.Sprint(i), Attempt: 1, Outcome: "success", Duration: 1500 * time.Millisecond, Error: strings.Repeat("x", 3)}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := b.History.Recent(ctx, "report", 2)
	if err != nil || len(got) != 2 || got[0].Slot != "2" || got[1].Slot != "1" || got[0].Duration != 1500*time.Millisecond || got[0].ID == "" {
		t.Fatalf("recent = %+v, %v", got, err)
	}
	if got, _ := b.History.Recent(ctx, "other", 5); len(got) != 0 {
		t.Fatalf("another task's history = %+v", got)
	}
}
