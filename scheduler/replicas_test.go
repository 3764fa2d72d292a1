package scheduler_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/redislock"
	"github.com/slotd/slotd/scheduler"
	"github.com/slotd/slotd/tasks"
)

// With min_replicas_ack, a task whose slot is marked done on the master
// but not acknowledged by the replica (stalled by the task itself, between
// claim and complete) still counts as a success, once: the marker is
// written, and retrying the complete would only wait again.
func TestCompleteNotAcknowledgedIsASuccess(t *testing.T) {
	srv := redistest.Start(t)
	rep := redistest.StartReplica(t, srv)
	t.Cleanup(func() { rep.Signal(syscall.SIGCONT) })
	store := redislock.New(srv.Client(), "slotd", redislock.WithMinReplicasAck(1, 200*time.Millisecond))
	t.Cleanup(func() { store.Close() })
	l := newLedger()
	stall := func(context.Context, tasks.Run) error {
		rep.Signal(syscall.SIGSTOP)
		return nil
	}
	task := testTask(t, "acked", "0 * * * *", l.job(stall), func(t *scheduler.Task) {
		t.Catchup = scheduler.CatchupLatest
		t.Lease = 2 * time.Second
	})
	r := startReplica(t, "solo", store, time.Second, []scheduler.Task{task})
	rs := l.await(t, "the attempt", 20*time.Second, func(rs []record) bool { return len(rs) > 0 && rs[0].done })
	for deadline := time.Now().Add(10 * time.Second); value(t, r.sched, "slotd_runs_total", "acked", "success") == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the run was not counted a success within 10s")
		}
	}
	st, err := lock.ReadState(context.Background(), store, lock.Slot{Task: "acked", ID: rs[0].run.Slot})
	if err != nil || st.Status != "done" {
		t.Fatalf("state = %+v, %v; want done", st, err)
	}
	if n := value(t, r.sched, "slotd_finish_errors_total", "acked", ""); n != 0 {
		t.Errorf("finish errors = %v, want 0: the slot was marked done", n)
	}
	r.stop()
	if rs := l.snapshot(); len(rs) != 1 {
		t.Fatalf("ran %d times, want 1:\n%s", len(rs), dump(rs))
	}
}
