package scheduler_test

import (
	"context"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/internal/testlane"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/redislock"
	"github.com/slotd/slotd/scheduler"
)

// lostReplyStore loses the reply of its first claim of task: it sends the
// claim to a stopped (SIGSTOP) redis-server, so that the call's ctx ends
// first, then resumes the server, which runs the claim, and answers the
// caller the call's error once the claim has landed.
type lostReplyStore struct {
	*redislock.Store
	srv  *redistest.Server
	task string
	t    *testing.T
	once sync.Once
	slot chan string // the slot whose claim's reply was lost
}

func (s *lostReplyStore) Claim(ctx context.Context, slot lock.Slot, replica string, p lock.Policy) (lock.Claim, error) {
	first := false
	if slot.Task == s.task {
		s.once.Do(func() { first = true })
	}
	if !first {
		return s.Store.Claim(ctx, slot, replica, p)
	}
	warm := lock.Slot{Task: "warm", ID: slot.ID, Time: slot.Time, Deadline: slot.Deadline}
	if _, err := s.Store.Claim(ctx, warm, replica, p); err != nil { // the script loaded
		return lock.Claim{}, err
	}
	s.srv.Signal(syscall.SIGSTOP)
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	c, err := s.Store.Claim(cctx, slot, replica, p)
	cancel()
	s.srv.Signal(syscall.SIGCONT)
	if err == nil {
		s.t.Errorf("a claim to a stopped server answered %v", c.Result)
		return c, nil
	}
	state, _ := redislock.Keys("slotd", slot)
	rdb := s.srv.Client()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if v, _ := rdb.Get(context.Background(), state).Result(); v != "" {
			s.slot <- slot.ID
			return lock.Claim{}, err
		}
	}
	s.t.Errorf("the claim sent before the stop never landed")
	return lock.Claim{}, err
}

// With max_attempts = 1, a slot whose claim's reply was lost still runs,
// once, as attempt 1: the replica's retry takes its own landed claim over
// (issue 28 item 3). Before, the retry found the slot held by itself,
// waited out the lease, and found its one attempt spent: exhausted, never
// run.
func TestLostClaimReplyStillRunsTheSlotOnce(t *testing.T) {
	testlane.Parallel(t, lightLane)
	srv := redistest.Start(t)
	inner := redislock.New(srv.Client(), "slotd")
	if err := inner.Subscribe(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inner.Close() })
	store := &lostReplyStore{Store: inner, srv: srv, task: "once", t: t, slot: make(chan string, 1)}
	l := newLedger()
	task := testTask(t, "once", "@every 3s", l.job(ok), func(t *scheduler.Task) {
		t.MaxAttempts = 1
		t.Lease = 10 * time.Second
	})
	startReplica(t, "r1", store, time.Second, []scheduler.Task{task})
	var lost string
	select {
	case lost = <-store.slot:
	case <-time.After(15 * time.Second):
		t.Fatal("no claim of the task was sent")
	}
	rs := l.await(t, "the slot whose claim's reply was lost, run", 10*time.Second, func(rs []record) bool {
		for _, r := range rs {
			if r.run.Slot == lost && r.done {
				return true
			}
		}
		return false
	})
	runs := bySlot(rs)[lost]
	if len(runs) != 1 || runs[0].run.Attempt != 1 || runs[0].err != nil {
		t.Fatalf("slot %s: %d runs, want one, attempt 1, succeeded:\n%s", lost, len(runs), dump(runs))
	}
}
