package scheduler

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/stats"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/memlock"
	"github.com/slotd/slotd/scheduler/schedule"
	"github.com/slotd/slotd/tasks"
)

// An attempt whose claim's reply came after the lease's validity does not
// start its task: the lease is lost while it is taken (lock.Hold), and the
// loss reaches the task's context before the task could start, with
// tasks.ErrNoGrace, on the attempt's own goroutine (the Lost hook), not
// on a watcher that might come too late. The attempt ends lease_lost.
func TestAttemptLostOnArrivalRunsNothing(t *testing.T) {
	every, err := schedule.Parse("* * * * * *", "")
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	store, hist := memlock.Open()
	s := New([]Task{{
		Name: "late", Spec: "* * * * * *", Plugin: "test", Params: map[string]any{},
		Policy:  lock.Policy{Lease: 15 * time.Second, DoneTTL: time.Minute, MaxAttempts: 3},
		Timeout: time.Minute, Catchup: CatchupNone, Schedule: every,
		Job: tasks.TaskFunc(func(context.Context) error { ran = true; return nil }),
	}}, store, WithLogger(slog.New(slog.DiscardHandler)), WithReplica("r1"), WithHistory(hist))
	task := &s.Tasks()[0]
	at := time.Now().Truncate(time.Second).Add(-time.Second)
	slot := lock.Slot{Task: task.Name, ID: "late", Time: at, Deadline: at.Add(time.Hour)}
	c, err := store.Claim(context.Background(), slot, s.owner, task.Policy)
	if err != nil || c.Result != lock.Won {
		t.Fatalf("claim: %v, %v", c.Result, err)
	}
	c.Sent = time.Now().Add(-task.Lease) // the reply came a whole lease late
	finished, failed := s.newAttempt(task, slot, c).run(context.Background(), context.Background())
	if ran {
		t.Error("the task ran under a lease lost before it started")
	}
	if finished || failed == nil || failed.Outcome != stats.OutcomeLeaseLost {
		t.Fatalf("finished %v, entry %+v; want a failed attempt, outcome %s", finished, failed, stats.OutcomeLeaseLost)
	}
	if !strings.HasPrefix(failed.Error, "task not started") || !strings.Contains(failed.Error, lock.ErrLeaseLost.Error()) {
		t.Errorf("entry error %q, want the task not started, its lease lost", failed.Error)
	}
}
