package scheduler_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/scheduler"
	"github.com/slotd/slotd/scheduler/history"
	"github.com/slotd/slotd/tasks"
)

// Issue 26 item 8: a triggered slot's first attempt was 501 to its task
// (SLOTD_ATTEMPT), its hook and its history. They see 1..max_attempts, as
// on a scheduled slot; the tokens keep the counter's offset, so they stay
// above a same-second scheduled slot's.
func TestTriggeredAttemptsShownFromOne(t *testing.T) {
	stores := redisStores(t, 1)
	hist := history.NewMemory(100)
	l := newLedger()
	hooked := make(chan tasks.Run, 1)
	h := &scheduler.Hook{Plugin: "test", Params: map[string]any{}, Timeout: time.Minute,
		Job: tasks.TaskFunc(func(ctx context.Context) error {
			r, _ := tasks.RunFrom(ctx)
			hooked <- r
			return nil
		})}
	fail := l.job(func(_ context.Context, r tasks.Run) error { return fmt.Errorf("boom #%d", r.Attempt) })
	task := testTask(t, "report", "0 0 1 1 *", fail, func(d *scheduler.Task) {
		d.Deadline, d.MaxAttempts, d.OnFailure = 10*time.Minute, 2, h
	})
	startReplica(t, "r1", stores[0], time.Second, []scheduler.Task{task},
		scheduler.WithClockCheck(200*time.Millisecond), scheduler.WithHistory(hist))
	tr, err := controls(t, stores[0]).Trigger(context.Background(), task.Name, "", task.Window())
	if err != nil {
		t.Fatal(err)
	}
	slot := task.TriggerSlot(tr.Time)
	rs := l.await(t, "two attempts", 10*time.Second, func(rs []record) bool { return len(rs) == 2 && rs[1].done })
	for i, r := range rs {
		if r.run.Slot != slot.ID || r.run.Attempt != i+1 || r.run.Token != lock.Token(slot.Time, lock.TriggerBase+i+1) {
			t.Errorf("attempt %d: %+v; want attempt %d, token %d", i+1, r.run, i+1, lock.Token(slot.Time, lock.TriggerBase+i+1))
		}
	}
	select {
	case r := <-hooked:
		if r.Attempt != 2 || r.Token != lock.Token(slot.Time, lock.TriggerBase+2) {
			t.Errorf("the hook saw attempt %d, token %d; want 2, %d", r.Attempt, r.Token, lock.Token(slot.Time, lock.TriggerBase+2))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no hook for the exhausted trigger")
	}
	var es []scheduler.HistoryEntry
	await(t, "two history entries", 5*time.Second, func() bool {
		es, err = hist.Recent(context.Background(), task.Name, 10)
		return err == nil && len(es) == 2
	})
	for i, e := range es { // newest first
		if want := len(es) - i; e.Attempt != want {
			t.Errorf("history entry %+v; want attempt %d", e, want)
		}
	}
}
