package scheduler_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/internal/testlane"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/redislock"
	"github.com/slotd/slotd/scheduler"
	"github.com/slotd/slotd/tasks"
)

// lostOccupyStore loses the reply of its first Occupy that replaces
// (model/controls.pml's "occupy reply LOST"): the call goes to a stopped
// (SIGSTOP) redis-server, so its ctx ends first; the server then resumes
// and runs it, and the caller gets the call's error once the record has
// landed.
type lostOccupyStore struct {
	*redislock.Store
	srv  *redistest.Server
	t    *testing.T
	once sync.Once
	lost atomic.Bool
}

func (s *lostOccupyStore) Occupy(ctx context.Context, slot lock.Slot, owner lock.Owner, lease time.Duration, replace bool) (lock.Occupancy, error) {
	first := false
	_, _, running, _ := redislock.ControlKeys("slotd", slot.Task)
	rdb := s.srv.Client()
	if v, _ := rdb.Get(ctx, running).Result(); replace && v != "" && !strings.HasPrefix(v, slot.ID+" ") {
		s.once.Do(func() { first = true }) // the first Occupy that replaces another slot's record
	}
	if !first {
		return s.Store.Occupy(ctx, slot, owner, lease, replace)
	}
	s.srv.Signal(syscall.SIGSTOP)
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	o, err := s.Store.Occupy(cctx, slot, owner, lease, replace)
	cancel()
	s.srv.Signal(syscall.SIGCONT)
	if err == nil {
		s.t.Errorf("an Occupy sent to a stopped server answered %+v", o)
		return o, nil
	}
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if v, _ := rdb.Get(context.Background(), running).Result(); v == slot.ID+" "+(lock.Value{Owner: owner}).String() {
			s.lost.Store(true)
			return lock.Occupancy{}, err
		}
	}
	s.t.Errorf("the Occupy sent before the stop never landed")
	return lock.Occupancy{}, err
}

// replace, with the replacing attempt's Occupy reply lost (its record
// landed, the replaced attempt was told to stop, and the attempt failed
// unstarted): its retry finds its own slot's record and, before the fix,
// started at once, while the replaced attempt was still stopping (found by
// model/controls.pml, R2). The retry awaits the replaced slot too.
func TestReplaceRetryAwaitsTheReplacedAttempt(t *testing.T) {
	testlane.Parallel(t, lightLane)
	srv := redistest.Start(t)
	inner := redislock.New(srv.Client(), "slotd")
	if err := inner.Subscribe(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inner.Close() })
	store := &lostOccupyStore{Store: inner, srv: srv, t: t}
	l := newLedger()
	var first atomic.Bool
	var oldEnded atomic.Bool
	started := make(chan struct{})
	overlapped := make(chan string, 1)
	job := l.job(func(ctx context.Context, r tasks.Run) error {
		if first.CompareAndSwap(false, true) {
			close(started)
			<-ctx.Done()
			// A slow stop: the replaced attempt's slot reads running
			// until it has returned and its slot is marked done.
			time.Sleep(1500 * time.Millisecond)
			oldEnded.Store(true)
			return ctx.Err()
		}
		if !oldEnded.Load() {
			select {
			case overlapped <- r.Slot:
			default:
			}
		}
		return nil
	})
	// A yearly task with a short window: only the triggers run.
	task := testTask(t, "report", "0 0 1 1 *", job, func(d *scheduler.Task) {
		d.Deadline = 10 * time.Minute
		d.Concurrency = scheduler.ConcurrencyReplace
	})
	startReplica(t, "r1", store, time.Second, []scheduler.Task{task}, scheduler.WithClockCheck(200*time.Millisecond))
	ctx := context.Background()
	tr1, err := inner.Trigger(ctx, task.Name, "", task.Window())
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the first trigger did not run")
	}
	var tr2 lock.Trigger
	await(t, "a second trigger, in a later second", 5*time.Second, func() bool {
		tr2, err = inner.Trigger(ctx, task.Name, "", task.Window())
		return err == nil && tr2.Time.After(tr1.Time)
	})
	rs := l.await(t, "the replacing trigger's run", 15*time.Second, func(rs []record) bool {
		for _, r := range rs {
			if r.run.Slot == task.TriggerSlot(tr2.Time).ID {
				return true
			}
		}
		return false
	})
	if !store.lost.Load() {
		t.Fatalf("no Occupy reply was lost: the test shows nothing\n%s", dump(rs))
	}
	select {
	case slot := <-overlapped:
		t.Fatalf("slot %s started while the replaced attempt was still stopping\n%s", slot, dump(rs))
	default:
	}
}

// replace, awaiting a replaced slot whose holder crashed with a longer
// lease than the task's (a reload shortened it): the await lasts a lease
// and a poll, longer than the new record's TTL. Before the fix the record
// was not renewed while the attempt awaited, ran out, and the started task
// was cancelled as superseded by nobody (model/controls.pml, R3; with no
// fault at all two slots' retries replacing each other await each other
// out the same way).
func TestReplaceAwaitKeepsItsRecord(t *testing.T) {
	testlane.Parallel(t, lightLane)
	stores := redisStores(t, 1)
	l := newLedger()
	causes := make(chan error, 1)
	job := l.job(func(ctx context.Context, _ tasks.Run) error {
		select {
		case <-ctx.Done():
			causes <- context.Cause(ctx)
			return ctx.Err()
		case <-time.After(2 * time.Second):
			causes <- nil
			return nil
		}
	})
	const lease = time.Second
	task := testTask(t, "report", "0 0 1 1 *", job, func(d *scheduler.Task) {
		d.Deadline = 10 * time.Minute
		d.Concurrency = scheduler.ConcurrencyReplace
		d.Lease = lease
	})
	ctx := context.Background()
	crashed := lock.Slot{Task: task.Name, ID: "19990101000000", Time: time.Now().Add(-time.Minute), Deadline: time.Now().Add(time.Hour)}
	c, err := stores[0].Claim(ctx, crashed, "dead#0", lock.Policy{Lease: 3 * lease, DoneTTL: time.Hour, MaxAttempts: 3})
	if err != nil || c.Result != lock.Won {
		t.Fatal(c, err)
	}
	if o, err := controls(t, stores[0]).Occupy(ctx, crashed, lock.Owner{ID: "dead#0", Attempt: c.Attempt}, 3*lease, false); err != nil || !o.Taken {
		t.Fatal(o, err)
	}
	startReplica(t, "r1", stores[0], time.Second, []scheduler.Task{task}, scheduler.WithClockCheck(200*time.Millisecond))
	if _, err := controls(t, stores[0]).Trigger(ctx, task.Name, "", task.Window()); err != nil {
		t.Fatal(err)
	}
	select {
	case cause := <-causes:
		if errors.Is(cause, scheduler.ErrSuperseded) {
			t.Fatalf("the replacing attempt was cancelled as superseded, with no newer slot: its record ran out while it awaited the crashed holder")
		}
		if cause != nil {
			t.Fatalf("the replacing attempt was cancelled: %v", cause)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the trigger did not run")
	}
}
