package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/slotd/slotd/internal/observe"
	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/internal/testlane"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/memlock"
	"github.com/slotd/slotd/lock/redislock"
	"github.com/slotd/slotd/scheduler"
	"github.com/slotd/slotd/scheduler/history"
	"github.com/slotd/slotd/scheduler/schedule"
	"github.com/slotd/slotd/tasks"
)

// ledger records every attempt the replicas start and finish.
type ledger struct {
	mu      sync.Mutex
	entries []record
	changed chan struct{}
}

type record struct {
	run     tasks.Run
	started time.Time
	err     error // set when finished
	done    bool
}

func newLedger() *ledger { return &ledger{changed: make(chan struct{}, 1)} }

func (l *ledger) add(r record) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries = append(l.entries, r)
	l.signal()
	return len(l.entries) - 1
}

func (l *ledger) finish(i int, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries[i].err, l.entries[i].done = err, true
	l.signal()
}

func (l *ledger) signal() {
	select {
	case l.changed <- struct{}{}:
	default:
	}
}

func (l *ledger) snapshot() []record {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]record(nil), l.entries...)
}

// await blocks until cond holds over the ledger, or fails the test.
func (l *ledger) await(t *testing.T, what string, timeout time.Duration, cond func([]record) bool) []record {
	t.Helper()
	deadline := time.After(timeout)
	for {
		if rs := l.snapshot(); cond(rs) {
			return rs
		}
		select {
		case <-l.changed:
		case <-deadline:
			t.Fatalf("timed out after %v waiting for %s; ledger:\n%s", timeout, what, dump(l.snapshot()))
		}
	}
}

func dump(rs []record) string {
	s := ""
	for _, r := range rs {
		s += fmt.Sprintf("  slot %s attempt %d replica %s token %d done %v err %v\n",
			r.run.Slot, r.run.Attempt, r.run.Replica, r.run.Token, r.done, r.err)
	}
	return s
}

// job returns a task that records itself in l and then does body.
func (l *ledger) job(body func(ctx context.Context, r tasks.Run) error) tasks.Task {
	return tasks.TaskFunc(func(ctx context.Context) error {
		r, _ := tasks.RunFrom(ctx)
		i := l.add(record{run: r, started: time.Now()})
		err := body(ctx, r)
		l.finish(i, err)
		return err
	})
}

func ok(context.Context, tasks.Run) error { return nil }

func testTask(t *testing.T, name, spec string, job tasks.Task, edit func(*scheduler.Task)) scheduler.Task {
	t.Helper()
	s, err := schedule.Parse(spec, "")
	if err != nil {
		t.Fatal(err)
	}
	task := scheduler.Task{
		Name: name, Spec: spec, Plugin: "test", Params: map[string]any{},
		Policy:  lock.Policy{Lease: 3 * time.Second, DoneTTL: time.Hour, MaxAttempts: 3},
		Timeout: time.Minute, Catchup: scheduler.CatchupNone,
		Schedule: s,
		Job:      job,
	}
	if edit != nil {
		edit(&task)
	}
	return task
}

// replica is one in-process scheduler; stop ends its Run and waits.
type replica struct {
	name   string
	cancel context.CancelFunc
	done   chan struct{}
	sched  *scheduler.Scheduler
}

func startReplica(t *testing.T, name string, store lock.Store, grace time.Duration, ts []scheduler.Task, opts ...scheduler.Option) *replica {
	t.Helper()
	r := &replica{name: name, done: make(chan struct{})}
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	opts = append([]scheduler.Option{scheduler.WithLogger(log),
		scheduler.WithReplica(name), scheduler.WithShutdownGrace(grace), scheduler.WithMaxClockSkew(time.Second)}, opts...)
	r.sched = scheduler.New(ts, store, opts...)
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() {
		defer close(r.done)
		if err := r.sched.Run(ctx); err != nil {
			t.Errorf("replica %s: Run: %v", name, err)
		}
	}()
	t.Cleanup(r.stop)
	return r
}

// seeingReplicas starts a replica without tasks on each store (with opts), with a
// clock check (a read of the live set) every 200 ms, and returns them once
// every one sees them all: tasks then given (reloadAll) due a few seconds
// later find the preferred claimant at work, however long a loaded -race
// run took to get there.
func seeingReplicas[S lock.Store](t *testing.T, stores []S, opts ...scheduler.Option) []*replica {
	t.Helper()
	var reps []*replica
	for i, s := range stores {
		reps = append(reps, startReplica(t, fmt.Sprintf("r%d", i+1), s, time.Second, nil,
			append([]scheduler.Option{scheduler.WithClockCheck(200 * time.Millisecond)}, opts...)...))
	}
	await(t, "every replica to see them all live", 60*time.Second, func() bool {
		for _, r := range reps {
			if len(r.sched.LiveView()) != len(reps) {
				return false
			}
		}
		return true
	})
	return reps
}

// reloadAll gives every replica ts.
func reloadAll(t *testing.T, reps []*replica, ts []scheduler.Task) {
	t.Helper()
	for _, r := range reps {
		if _, err := r.sched.Reload(context.Background(), ts); err != nil {
			t.Fatal(err)
		}
	}
}

func (r *replica) stop() {
	r.cancel()
	<-r.done
}

// testWriter sends logs to t.Log, so they show with a failing test only.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(p[:len(p)-1]))
	return len(p), nil
}

func redisStores(t *testing.T, n int) []lock.Store {
	srv := redistest.Start(t)
	var out []lock.Store
	for range n {
		r := redislock.New(srv.Client(), "slotd")
		if err := r.Subscribe(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		out = append(out, r)
	}
	return out
}

func bySlot(rs []record) map[string][]record {
	m := map[string][]record{}
	for _, r := range rs {
		m[r.run.Slot] = append(m[r.run.Slot], r)
	}
	return m
}

// Three replicas race for every one-second slot: each slot runs exactly
// once, as attempt 1, at or after its slot time, with a token above the
// previous slot's.
func TestEverySlotRunsOnceAcrossReplicas(t *testing.T) {
	testlane.Parallel(t, lightLane)
	stores := redisStores(t, 3)
	l := newLedger()
	task := testTask(t, "tick", "@every 1s", l.job(ok), nil)
	for i, s := range stores {
		startReplica(t, fmt.Sprintf("r%d", i), s, time.Second, []scheduler.Task{task})
	}
	rs := l.await(t, "4 completed slots", 15*time.Second, func(rs []record) bool {
		n := 0
		for _, r := range rs {
			if r.done {
				n++
			}
		}
		return n >= 4
	})
	var lastToken int64
	for slot, runs := range bySlot(rs) {
		if len(runs) != 1 {
			t.Errorf("slot %s ran %d times:\n%s", slot, len(runs), dump(runs))
		}
		r := runs[0]
		if r.run.Attempt != 1 {
			t.Errorf("slot %s: attempt %d, want 1", slot, r.run.Attempt)
		}
		if r.started.Before(r.run.SlotTime) {
			t.Errorf("slot %s started %v before its slot time", slot, r.run.SlotTime.Sub(r.started))
		}
		if r.run.Token != lock.Token(r.run.SlotTime, 1) {
			t.Errorf("slot %s: token %d, want %d", slot, r.run.Token, lock.Token(r.run.SlotTime, 1))
		}
	}
	for _, r := range rs {
		if r.run.Token <= lastToken {
			t.Errorf("token %d not above the previous %d", r.run.Token, lastToken)
		}
		lastToken = r.run.Token
	}
}

// A failed first attempt is released and retried at once, by any replica,
// inside the window.
func TestFailedAttemptIsRetried(t *testing.T) {
	testlane.Parallel(t, lightLane)
	stores := redisStores(t, 3)
	l := newLedger()
	task := testTask(t, "flaky", "@every 2s", l.job(func(_ context.Context, r tasks.Run) error {
		if r.Attempt == 1 {
			return errors.New("first attempt fails")
		}
		return nil
	}), nil)
	var reps []*replica
	for i, s := range stores {
		reps = append(reps, startReplica(t, fmt.Sprintf("r%d", i), s, time.Second, []scheduler.Task{task}))
	}
	rs := l.await(t, "a slot that failed once and then succeeded", 15*time.Second, func(rs []record) bool {
		for _, runs := range bySlot(rs) {
			if len(runs) == 2 && runs[1].done && runs[1].err == nil {
				return true
			}
		}
		return false
	})
	for slot, runs := range bySlot(rs) {
		if len(runs) > 2 {
			t.Errorf("slot %s: %d attempts, want at most 2:\n%s", slot, len(runs), dump(runs))
		}
		if len(runs) == 2 {
			a, b := runs[0], runs[1]
			if a.run.Attempt != 1 || b.run.Attempt != 2 || b.run.Token <= a.run.Token {
				t.Errorf("slot %s: attempts/tokens out of order:\n%s", slot, dump(runs))
			}
			if gap := b.started.Sub(a.started); gap > time.Second {
				t.Errorf("slot %s: retry started %v after the failure, want prompt (pub/sub)", slot, gap)
			}
		}
	}
	var successes float64
	for _, r := range reps {
		r.stop() // counters are final once Run has returned
		successes += value(t, r.sched, "slotd_runs_total", "flaky", "success")
	}
	if successes < 1 {
		t.Errorf("slotd_runs_total{outcome=success} summed over replicas = %v, want >= 1", successes)
	}
}

// A task that always fails stops at exactly max_attempts per slot.
func TestAlwaysFailingTaskStopsAtCap(t *testing.T) {
	testlane.Parallel(t, lightLane)
	stores := redisStores(t, 3)
	l := newLedger()
	task := testTask(t, "broken", "@every 2s", l.job(func(context.Context, tasks.Run) error {
		return errors.New("always fails")
	}), func(t *scheduler.Task) { t.MaxAttempts = 3 })
	for i, s := range stores {
		startReplica(t, fmt.Sprintf("r%d", i), s, time.Second, []scheduler.Task{task})
	}
	var first string
	l.await(t, "a slot with 3 failed attempts", 15*time.Second, func(rs []record) bool {
		for slot, runs := range bySlot(rs) {
			if len(runs) == 3 && runs[2].done {
				first = slot
				return true
			}
		}
		return false
	})
	// Wait for the next slot to start, by which time the first is settled.
	l.await(t, "the next slot", 10*time.Second, func(rs []record) bool {
		for _, r := range rs {
			if r.run.Slot > first {
				return true
			}
		}
		return false
	})
	runs := bySlot(l.snapshot())[first]
	if len(runs) != 3 {
		t.Fatalf("slot %s: %d attempts, want exactly 3:\n%s", first, len(runs), dump(runs))
	}
	st, err := lock.ReadState(context.Background(), stores[0], lock.Slot{Task: "broken", ID: first})
	if err != nil || st.Attempts != 3 || st.Status != "free" {
		t.Fatalf("slot state = %+v, %v; want free with 3 attempts", st, err)
	}
}

// A task that panics is a failed attempt, and the daemon keeps running.
func TestPanicIsAFailure(t *testing.T) {
	l := newLedger()
	task := testTask(t, "panicky", "@every 1s", l.job(func(_ context.Context, r tasks.Run) error {
		if r.Attempt == 1 {
			panic("plugin bug")
		}
		return nil
	}), nil)
	rep := startReplica(t, "solo", memlock.New(nil), time.Second, []scheduler.Task{task})
	l.await(t, "a retry after the panic", 10*time.Second, func(rs []record) bool {
		for _, r := range rs {
			if r.run.Attempt == 2 && r.done {
				return true
			}
		}
		return false
	})
	if n := value(t, rep.sched, "slotd_runs_total", "panicky", "failure"); n < 1 {
		t.Fatalf("failures counted = %v, want >= 1", n)
	}
}

// A task past its timeout is cancelled with cause ErrTimeout.
func TestTimeoutCancelsTask(t *testing.T) {
	l := newLedger()
	causes := make(chan error, 4)
	task := testTask(t, "slow", "@every 1s", l.job(func(ctx context.Context, _ tasks.Run) error {
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return ctx.Err()
	}), func(t *scheduler.Task) { t.Timeout = 100 * time.Millisecond; t.MaxAttempts = 1 })
	rep := startReplica(t, "solo", memlock.New(nil), time.Second, []scheduler.Task{task})
	select {
	case c := <-causes:
		if !errors.Is(c, scheduler.ErrTimeout) {
			t.Fatalf("cause = %v, want ErrTimeout", c)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("task not cancelled by its timeout")
	}
	l.await(t, "the timed-out attempt to finish", 5*time.Second, func(rs []record) bool { return len(rs) > 0 && rs[0].done })
	rep.stop()
	if n := value(t, rep.sched, "slotd_runs_total", "slow", "timeout"); n < 1 {
		t.Fatalf("timeouts counted = %v, want >= 1", n)
	}
}

// SIGTERM (a cancelled Run) mid-task: after the grace the task is cancelled
// and its slot released, and a peer takes it over at once — long before the
// lease would have run out.
func TestShutdownHandsSlotToPeer(t *testing.T) {
	testlane.Parallel(t, lightLane)
	stores := redisStores(t, 2)
	l := newLedger()
	const lease = 10 * time.Second
	var first sync.Once
	task := testTask(t, "long", "@every 2s", l.job(func(ctx context.Context, r tasks.Run) error {
		block := false
		first.Do(func() { block = true })
		if block {
			<-ctx.Done() // the first attempt runs until cancelled
			return context.Cause(ctx)
		}
		return nil
	}), func(t *scheduler.Task) { t.Lease = lease; t.Deadline = 30 * time.Second })
	reps := map[string]*replica{
		"a": startReplica(t, "a", stores[0], 200*time.Millisecond, []scheduler.Task{task}),
		"b": startReplica(t, "b", stores[1], 200*time.Millisecond, []scheduler.Task{task}),
	}
	rs := l.await(t, "a replica to start a slot", 10*time.Second, func(rs []record) bool { return len(rs) > 0 })
	slot, holder := rs[0].run.Slot, rs[0].run.Replica
	peer := map[string]string{"a": "b", "b": "a"}[holder]
	stopped := time.Now()
	reps[holder].stop()
	rs = l.await(t, "the peer to take the slot over", 10*time.Second, func(rs []record) bool {
		for _, r := range rs {
			if r.run.Slot == slot && r.run.Replica == peer && r.done {
				return true
			}
		}
		return false
	})
	for _, r := range rs {
		if r.run.Slot == slot && r.run.Replica == peer {
			if took := r.started.Sub(stopped); took > lease/2 {
				t.Fatalf("peer took over %v after shutdown began, want well under the %v lease", took, lease)
			}
			if r.run.Attempt != 2 {
				t.Fatalf("takeover attempt = %d, want 2", r.run.Attempt)
			}
		}
	}
	if n := value(t, reps[holder].sched, "slotd_runs_total", "long", "canceled"); n != 1 {
		t.Fatalf("replica %s canceled runs = %v, want 1", holder, n)
	}
}

// offsetClock is the real clock moved by a fixed offset: a replica whose
// clock is wrong.
type offsetClock struct{ d time.Duration }

func (c offsetClock) Now() time.Time { return time.Now().Add(c.d) }
func (c offsetClock) NewTimer(d time.Duration) scheduler.Timer {
	return stdTimer{time.NewTimer(d)}
}

func (c offsetClock) AfterFunc(d time.Duration, f func()) scheduler.Timer {
	return stdTimer{time.AfterFunc(d, f)}
}

type stdTimer struct{ t *time.Timer }

func (t stdTimer) C() <-chan time.Time { return t.t.C }
func (t stdTimer) Stop() bool          { return t.t.Stop() }

// Replicas with clocks two minutes ahead and behind never start a slot
// before its time by the store's clock, and never run one twice.
func TestSkewedClocksRunNothingEarly(t *testing.T) {
	testlane.Parallel(t, lightLane)
	stores := redisStores(t, 3)
	l := newLedger()
	task := testTask(t, "skew", "@every 1s", l.job(ok), nil)
	skews := []time.Duration{2 * time.Minute, -2 * time.Minute, 0}
	var reps []*replica
	for i, s := range stores {
		reps = append(reps, startReplica(t, fmt.Sprintf("r%d", i), s, time.Second, []scheduler.Task{task},
			scheduler.WithClock(offsetClock{skews[i]})))
	}
	rs := l.await(t, "4 slots", 15*time.Second, func(rs []record) bool { return len(rs) >= 4 })
	for slot, runs := range bySlot(rs) {
		if len(runs) != 1 {
			t.Errorf("slot %s ran %d times", slot, len(runs))
		}
		// The test's clock is the store's: both are this machine's.
		if early := runs[0].run.SlotTime.Sub(runs[0].started); early > 0 {
			t.Errorf("slot %s started %v early on %s", slot, early, runs[0].run.Replica)
		}
	}
	for i, r := range reps {
		_, skew := r.sched.Healthy()
		if want := -skews[i]; (skew - want).Abs() > time.Second {
			t.Errorf("replica %s measured skew %v, want about %v", r.name, skew, want)
		}
	}
}

// catchup = "latest" joins the window that is open at start-up; "none"
// waits for the next fire time.
func TestCatchupLatest(t *testing.T) {
	l := newLedger()
	hourly := testTask(t, "hourly", "0 * * * *", l.job(ok), func(t *scheduler.Task) { t.Catchup = scheduler.CatchupLatest })
	none := testTask(t, "hourly-none", "0 * * * *", l.job(ok), nil)
	store := memlock.New(nil)
	rep := startReplica(t, "solo", store, time.Second, []scheduler.Task{hourly, none})
	rs := l.await(t, "the current hour's slot", 10*time.Second, func(rs []record) bool { return len(rs) > 0 && rs[0].done })
	now := time.Now().UTC()
	if want := now.Truncate(time.Hour); !rs[0].run.SlotTime.Equal(want) && now.Sub(want) > 2*time.Second {
		t.Fatalf("caught-up slot time = %v, want %v", rs[0].run.SlotTime, want)
	}
	rep.stop()
	for _, r := range l.snapshot() {
		if r.run.Task == "hourly-none" {
			t.Fatalf("catchup none ran slot %s at start-up", r.run.Slot)
		}
	}
}

// value returns the counter name{task, other label} in a scrape of
// sched's metrics, read through Prometheus' parser (label "" for a series
// with the task label only), 0 if the series does not exist.
func value(t *testing.T, sched *scheduler.Scheduler, name, task, label string) float64 {
	t.Helper()
	var b strings.Builder
	if err := observe.WriteMetrics(&b, sched); err != nil {
		t.Fatal(err)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(b.String()))
	if err != nil {
		t.Fatalf("the scrape does not parse: %v\n%s", err, b.String())
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var gotTask, gotLabel bool
			for _, lp := range m.GetLabel() {
				gotTask = gotTask || (lp.GetName() == "task" && lp.GetValue() == task)
				gotLabel = gotLabel || lp.GetValue() == label || (label == "" && len(m.GetLabel()) == 1)
			}
			if gotTask && gotLabel {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// An operator's rerun of a done slot, while its window is open, runs it
// again on the live daemons — as a later attempt, with a higher token —
// once, whether the replica that takes it is the one that ran it or a peer
// that learnt of the success from the completion's notice.
func TestRerunOfDoneSlotRunsAgain(t *testing.T) {
	for _, replicas := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d replicas", replicas), func(t *testing.T) { testRerunOfDoneSlot(t, replicas) })
	}
}

func testRerunOfDoneSlot(t *testing.T, replicas int) {
	l := newLedger()
	task := testTask(t, "hourly", "0 * * * *", l.job(ok), func(t *scheduler.Task) { t.Catchup = scheduler.CatchupLatest })
	store := memlock.New(nil)
	for i := range replicas {
		startReplica(t, fmt.Sprintf("r%d", i+1), store, time.Second, []scheduler.Task{task})
	}
	rs := l.await(t, "the current slot", 10*time.Second, func(rs []record) bool { return len(rs) > 0 && rs[0].done })
	first := rs[0].run
	slot := lock.Slot{Task: "hourly", ID: first.Slot, Time: first.SlotTime, Deadline: first.SlotTime.Add(time.Hour)}
	// The job ends a moment before the scheduler marks the slot done.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if st, _ := lock.ReadState(context.Background(), store, slot); st.Status == "done" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("slot not marked done within 5s of its success")
		}
	}
	if r, err := store.Rerun(context.Background(), slot, false); err != nil || !r.Cleared {
		t.Fatalf("rerun: %+v, %v", r, err)
	}
	rs = l.await(t, "the rerun", 10*time.Second, func(rs []record) bool { return len(rs) > 1 && rs[1].done })
	if again := rs[1].run; again.Slot != first.Slot || again.Attempt != 2 || again.Token <= first.Token {
		t.Fatalf("rerun ran %+v after %+v; want the same slot as attempt 2 with a higher token", again, first)
	}
	if rs := l.snapshot(); len(rs) != 2 {
		t.Fatalf("%d runs after one rerun, want 2: %+v", len(rs), rs)
	}
}

// steppingClock is the real clock plus an offset that a test can step, as
// when NTP or an operator moves a replica's wall clock.
type steppingClock struct{ d atomic.Int64 }

func (c *steppingClock) Now() time.Time { return time.Now().Add(time.Duration(c.d.Load())) }
func (c *steppingClock) NewTimer(d time.Duration) scheduler.Timer {
	return stdTimer{time.NewTimer(d)}
}

func (c *steppingClock) AfterFunc(d time.Duration, f func()) scheduler.Timer {
	return stdTimer{time.AfterFunc(d, f)}
}

// A wall-clock step of an hour either way, mid-task, changes nothing that
// matters: the running attempt keeps its lease (lease timing is monotonic),
// no slot starts early by the store's clock, none runs twice, and both
// replicas go on firing once their skew is measured again.
func TestWallClockStepMidTask(t *testing.T) {
	stores := redisStores(t, 2)
	l := newLedger()
	clocks := []*steppingClock{{}, {}}
	started := make(chan struct{}, 1)
	task := testTask(t, "step", "@every 1s", l.job(func(ctx context.Context, r tasks.Run) error {
		select {
		case started <- struct{}{}:
			// The first attempt outlives three leases across the step.
			select {
			case <-time.After(3500 * time.Millisecond):
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		default:
			return nil
		}
	}), func(t *scheduler.Task) { t.Lease = time.Second })
	var reps []*replica
	for i, s := range stores {
		// A clock check every 2 s, not the default 10 s: the replicas fire
		// again once their skew is measured again, which is the claim; how
		// soon is the option's business (TestLoneReplicaFiresAfterClockStepsBack).
		reps = append(reps, startReplica(t, fmt.Sprintf("r%d", i), s, time.Second, []scheduler.Task{task},
			scheduler.WithClock(clocks[i]), scheduler.WithClockCheck(2*time.Second)))
	}
	<-started
	clocks[0].d.Store(int64(time.Hour))
	clocks[1].d.Store(int64(-time.Hour))
	rs := l.await(t, "the long attempt and 4 more slots", 30*time.Second, func(rs []record) bool {
		n := 0
		for _, r := range rs {
			if r.done {
				n++
			}
		}
		return len(rs) > 0 && rs[0].done && n >= 5
	})
	if rs[0].err != nil {
		t.Fatalf("the attempt running across the step failed: %v", rs[0].err)
	}
	for slot, runs := range bySlot(rs) {
		if len(runs) != 1 {
			t.Errorf("slot %s ran %d times:\n%s", slot, len(runs), dump(runs))
		}
		if early := runs[0].run.SlotTime.Sub(runs[0].started); early > 0 {
			t.Errorf("slot %s started %v early", slot, early)
		}
	}
	var renewals float64
	for _, r := range reps {
		r.stop()
		if n := value(t, r.sched, "slotd_lease_losses_total", "step", ""); n != 0 {
			t.Errorf("replica %s lost %v leases across the wall-clock step", r.name, n)
		}
		renewals += value(t, r.sched, "slotd_lease_renewals_total", "step", "")
	}
	if renewals < 6 { // 3.5s at one renewal per lease/3
		t.Errorf("%v lease renewals during a 3.5s attempt on a 1s lease, want >= 6", renewals)
	}
}

// A lone replica whose wall clock steps back an hour keeps firing once it
// has re-measured its skew: its timer does not sit out the hour it thought
// it had to wait. The fire loop wakes (each second) before the skew check
// (every 2s) corrects the clock, so it does see the hour-long wait.
func TestLoneReplicaFiresAfterClockStepsBack(t *testing.T) {
	testlane.Parallel(t, lightLane)
	l := newLedger()
	clock := &steppingClock{}
	task := testTask(t, "lone", "@every 1s", l.job(ok), nil)
	startReplica(t, "solo", memlock.New(nil), time.Second, []scheduler.Task{task},
		scheduler.WithClock(clock), scheduler.WithClockCheck(2*time.Second))
	l.await(t, "a first slot", 10*time.Second, func(rs []record) bool { return len(rs) > 0 && rs[0].done })
	clock.d.Store(int64(-time.Hour))
	stepped := time.Now()
	l.await(t, "3 slots after the step", 10*time.Second, func(rs []record) bool {
		n := 0
		for _, r := range rs {
			if r.done && r.started.After(stepped) {
				n++
			}
		}
		return n >= 3
	})
}

// failingComplete is a store whose completions get no answer while the
// slot is running, and which, once a completion was tried, confirms no
// renewal either: the lease is truly lost before the slot can be marked
// done, and the store's own answer, once its key has expired, is that
// the slot is not held.
type failingComplete struct {
	lock.Store
	completing atomic.Bool
}

func (f *failingComplete) Complete(ctx context.Context, s lock.Slot, o lock.Owner, d time.Duration) error {
	f.completing.Store(true)
	if st, err := lock.ReadState(ctx, f.Store, s); err == nil && st.Status != "running" {
		return f.Store.Complete(ctx, s, o, d)
	}
	return errors.New("injected: connection reset")
}

func (f *failingComplete) Renew(ctx context.Context, s lock.Slot, o lock.Owner, d time.Duration) error {
	if f.completing.Load() {
		return errors.New("injected: connection reset")
	}
	return f.Store.Renew(ctx, s, o, d)
}

// A task that succeeded but whose lease was lost before the slot could be
// marked done is recorded as success_unmarked (a peer may run the slot
// again), and is not run again by the same replica: that would only add a
// duplicate.
func TestSuccessNotRerunWhenCompleteFails(t *testing.T) {
	testlane.Parallel(t, lightLane)
	l := newLedger()
	task := testTask(t, "once", "0 * * * *", l.job(ok), func(t *scheduler.Task) {
		t.Catchup = scheduler.CatchupLatest
		t.Lease = time.Second
	})
	hist := history.NewMemory(0)
	rep := startReplica(t, "solo", &failingComplete{Store: memlock.New(nil)}, time.Second, []scheduler.Task{task}, scheduler.WithHistory(hist))
	l.await(t, "the attempt", 10*time.Second, func(rs []record) bool { return len(rs) > 0 && rs[0].done })
	// Completion is retried past the lease (1s) until the store answers
	// that the slot is no longer held; then the replica gives the slot up
	// and records the success as unmarked.
	es := awaitHistory(t, hist, "once", "attempt 1's entry", func(es []scheduler.HistoryEntry) bool { return len(es) > 0 })
	if e := es[0]; e.Outcome != "success_unmarked" || e.Attempt != 1 || !strings.Contains(e.Error, "not be marked done") {
		t.Errorf("history: %q attempt %d (%s), want success_unmarked attempt 1, saying it was not marked done", e.Outcome, e.Attempt, e.Error)
	}
	for name, label := range map[string]string{"slotd_runs_total": "success_unmarked", "slotd_finish_errors_total": "", "slotd_lease_losses_total": ""} {
		if v := value(t, rep.sched, name, "once", label); v != 1 {
			t.Errorf("%s{%s} = %v, want 1", name, label, v)
		}
	}
	// Past the lease, the slot is claimable again: a replica that still
	// wanted it would have claimed and rerun it by now.
	time.Sleep(1500 * time.Millisecond)
	rep.stop()
	if rs := l.snapshot(); len(rs) != 1 {
		t.Fatalf("the slot ran %d times on one replica, want 1:\n%s", len(rs), dump(rs))
	}
}

// failingRenew fails every renewal of one task's slots.
type failingRenew struct {
	lock.Store
	task string
}

func (f *failingRenew) Renew(ctx context.Context, s lock.Slot, o lock.Owner, d time.Duration) error {
	if s.Task == f.task {
		return errors.New("injected: connection reset")
	}
	return f.Store.Renew(ctx, s, o, d)
}

// A task whose lease is lost is told to stop at once (its context's cause
// carries tasks.ErrNoGrace, so exec kills its tree without a grace: a peer
// may claim the slot once the lease's margin runs out); one that times out
// keeps its grace.
func TestLeaseLossAsksTaskToStopAtOnce(t *testing.T) {
	causes := make(chan [2]any, 2)
	wait := func(ctx context.Context, r tasks.Run) error {
		<-ctx.Done()
		causes <- [2]any{r.Task, context.Cause(ctx)}
		return context.Cause(ctx)
	}
	l := newLedger()
	lost := testTask(t, "lost", "0 * * * *", l.job(wait), func(t *scheduler.Task) {
		t.Catchup, t.Lease = scheduler.CatchupLatest, time.Second
	})
	slow := testTask(t, "slow", "0 * * * *", l.job(wait), func(t *scheduler.Task) {
		t.Catchup, t.Timeout = scheduler.CatchupLatest, 500*time.Millisecond
	})
	startReplica(t, "solo", &failingRenew{Store: memlock.New(nil), task: "lost"}, time.Second, []scheduler.Task{lost, slow})
	for range 2 {
		select {
		case c := <-causes:
			err, _ := c[1].(error)
			switch c[0] {
			case "lost":
				if !errors.Is(err, lock.ErrLeaseLost) || !errors.Is(err, tasks.ErrNoGrace) {
					t.Errorf("lease lost: cause %v, want lock.ErrLeaseLost and tasks.ErrNoGrace", err)
				}
			case "slow":
				if !errors.Is(err, scheduler.ErrTimeout) || errors.Is(err, tasks.ErrNoGrace) {
					t.Errorf("timeout: cause %v, want scheduler.ErrTimeout without tasks.ErrNoGrace", err)
				}
			}
		case <-time.After(15 * time.Second):
			t.Fatal("the tasks were not cancelled within 15s")
		}
	}
}
