package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/assemble"
	"github.com/slotd/slotd/internal/observe"
	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/internal/store"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/redislock"
	"github.com/slotd/slotd/scheduler"
)

// In Redlock mode the daemon's store and history span every master, and
// status, history, rerun, pause and resume (and the store's trigger) read
// and write them with one master down.
func TestRedlockBackendAndCommands(t *testing.T) {
	ctx := context.Background()
	var srvs []*redistest.Server
	var urls []string
	for range 3 {
		s := redistest.Start(t)
		srvs = append(srvs, s)
		urls = append(urls, fmt.Sprintf("%q", s.URL()))
	}
	path := filepath.Join(t.TempDir(), "slotd.toml")
	src := fmt.Sprintf("[redis]\nredlock = [%s]\n\n[http]\nlisten = \"off\"\n%s", strings.Join(urls, ", "), sharedTasks)
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := assemble.Load(path, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	b, err := store.Open(ctx, d.Config, nil, store.WithMaxRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, ok := b.Store.(*redislock.Redlock); !ok {
		t.Fatalf("store is %T, want *redislock.Redlock", b.Store)
	}
	task, _ := findTask(d, "report")
	now, err := b.Store.Time(ctx)
	if err != nil {
		t.Fatal(err)
	}
	at, _ := task.Schedule.Latest(now)
	slot := task.Slot(at)
	c, err := b.Store.Claim(ctx, slot, "r1", lock.Policy{Lease: time.Hour, DoneTTL: task.DoneTTL, MaxAttempts: task.MaxAttempts})
	if err != nil || c.Result != lock.Won {
		t.Fatalf("claim on 3 masters = %+v, %v", c, err)
	}
	if err := b.Store.Complete(ctx, slot, lock.Owner{ID: "r1", Attempt: c.Attempt}, task.DoneTTL); err != nil {
		t.Fatal(err)
	}
	if err := b.History.Append(ctx, "report", scheduler.HistoryEntry{Slot: slot.ID, SlotTime: slot.Time, Attempt: c.Attempt,
		Token: lock.Token(slot.Time, c.Attempt), Replica: "r1", Outcome: "success", Started: now}); err != nil {
		t.Fatal(err)
	}
	state, _ := redislock.Keys("slotd", slot)
	for i, s := range srvs {
		if v := s.Client().Get(ctx, state).Val(); !strings.HasPrefix(v, "done:r1:1:") {
			t.Errorf("master %d holds %q, want the done marker", i, v)
		}
		if n := s.Client().XLen(ctx, redislock.HistoryKey("slotd", "report")).Val(); n != 1 {
			t.Errorf("master %d holds %d history entries, want 1", i, n)
		}
	}
	srvs[0].Stop()
	r := runCLI(t, "status", "-config", path, "-json", "-n", "1")
	var rep observe.StatusReport
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &rep) != nil || len(rep.Tasks) != 2 {
		t.Fatalf("status with 2 of 3 masters: %v", r)
	}
	if got := rep.Tasks[0].Slots[0]; got.ID != slot.ID || got.Phase != "done" || got.Replica != "r1" || got.Last == nil {
		t.Errorf("status of the done slot: %+v", got)
	}
	if r := runCLI(t, "history", "-config", path, "report"); r.code != 0 || !strings.Contains(r.stdout, slot.ID) || !strings.Contains(r.stdout, "success") {
		t.Errorf("history with 2 of 3 masters: %v", r)
	}
	if r := runCLI(t, "rerun", "-config", path, "report", slot.ID); r.code != 0 {
		t.Errorf("rerun with 2 of 3 masters: %v", r)
	}
	for i, s := range srvs[1:] {
		if v := s.Client().Get(ctx, state).Val(); v != "" {
			t.Errorf("master %d holds %q after the rerun, want nothing", i+1, v)
		}
	}
	// The operator controls, on the 2 masters left (trigger asks a running
	// daemon's API, so the store is asked here).
	ctl := b.Store.(lock.Controls)
	if tr, err := ctl.Trigger(ctx, "report", "k1", time.Hour); err != nil || tr.Result != lock.Started {
		t.Errorf("trigger with 2 of 3 masters = %+v, %v", tr, err)
	}
	if tr, err := ctl.Trigger(ctx, "report", "k1", time.Hour); err != nil || tr.Result != lock.Repeated {
		t.Errorf("trigger again with its key = %+v, %v; want repeated", tr, err)
	}
	if r := runCLI(t, "pause", "-config", path, "report"); r.code != exitOK || !strings.Contains(r.stdout, "paused report") {
		t.Errorf("pause with 2 of 3 masters: %v", r)
	}
	if p, err := ctl.Paused(ctx, []string{"report"}, false); err != nil || !p[0] {
		t.Errorf("pause state read after the pause = %v, %v", p, err)
	}
	if r := runCLI(t, "resume", "-config", path, "report"); r.code != exitOK || !strings.Contains(r.stdout, "resumed report") {
		t.Errorf("resume with 2 of 3 masters: %v", r)
	}
	srvs[1].Stop()
	if r := runCLI(t, "status", "-config", path); r.code == 0 || !strings.Contains(r.stderr, "no quorum") {
		t.Errorf("status with 1 of 3 masters: %v; want a failure that says there is no quorum", r)
	}
}
