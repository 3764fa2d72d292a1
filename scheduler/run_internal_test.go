package scheduler

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/memlock"
	"github.com/slotd/slotd/lock/redislock"
	"github.com/slotd/slotd/scheduler/schedule"
	"github.com/slotd/slotd/tasks"
)

// testLoop is a loop with no goroutine of its own: the test is the owner
// and calls the transitions itself, one event at a time.
func testLoop(t *testing.T, store lock.Store) *loop {
	t.Helper()
	sched, err := schedule.Parse("0 * * * *", "")
	if err != nil {
		t.Fatal(err)
	}
	task := Task{
		Name: "report", Spec: "0 * * * *", Plugin: "test", Params: map[string]any{},
		Policy:  lock.Policy{Lease: 15 * time.Second, DoneTTL: 48 * time.Hour, MaxAttempts: 3},
		Timeout: time.Hour,
		// A window of 2 h from the hour: the tests fire the current
		// hour's slot, and with the hourly window one that runs in an
		// hour's last seconds would find a lease outlasting it, or a claim
		// late (two deferral tests failed so at 02:00:00).
		Deadline: 2 * time.Hour,
		Catchup:  CatchupLatest,
		Schedule: sched,
		Job:      tasks.TaskFunc(func(context.Context) error { return nil }),
	}
	s := New([]Task{task}, store)
	ctx, cancel := context.WithCancel(context.Background())
	l := newLoop(s, ctx, ctx, func(error) {})
	t.Cleanup(func() {
		cancel()
		l.onShutdown()
		l.workers.Wait()
	})
	return l
}

// runAfter makes a run of the "report" task's slot of the current hour and
// hands it reply as its first claim's, as the loop does with a ClaimMany's.
func runAfter(t *testing.T, l *loop, reply lock.ClaimReply, want runState) *run {
	t.Helper()
	r := l.newRun(&l.s.Tasks()[0], time.Now().Truncate(time.Hour))
	r.state = claiming
	l.onClaimReply(r, reply)
	if r.state != want {
		t.Fatalf("after a %v claim: state %v, want %v", reply.Result, r.state, want)
	}
	return r
}

// A loser waiting on its wake time (the slot held by a peer) is settled by
// the holder's completion notice: it waits now until a little after its
// deadline, without a claim.
func TestCompletionSettlesWaitingRun(t *testing.T) {
	l := testLoop(t, memlock.New(time.Now))
	r := runAfter(t, l, lock.ClaimReply{Claim: lock.Claim{Result: lock.Held, Wait: time.Hour}}, waiting)
	if r.index < 0 {
		t.Fatal("a waiting run has no wake time")
	}
	l.onNotice(r, lock.Completed)
	if r.state != settled || r.news != noNotice || len(l.claims) != 0 {
		t.Errorf("after the completion: state %v, news %v, %d claims queued; want settled, no news, none",
			r.state, r.news, len(l.claims))
	}
	if want := r.slot.Deadline.Add(expireLag); len(l.wakes) != 1 || r.wakeAt.Sub(want).Abs() > time.Second {
		t.Errorf("%d wake times, this one %v; want 1, at about %v", len(l.wakes), r.wakeAt, want)
	}
}

// A run already settled (its claim found the slot done) ignores a
// completion notice; a rerun makes it claim again.
func TestCompletionLeavesSettledRun(t *testing.T) {
	l := testLoop(t, memlock.New(time.Now))
	r := runAfter(t, l, lock.ClaimReply{Claim: lock.Claim{Result: lock.Done}}, settled)
	at := r.wakeAt
	l.onNotice(r, lock.Completed)
	if r.state != settled || r.news != noNotice || !r.wakeAt.Equal(at) || len(l.wakes) != 1 {
		t.Errorf("after a completion notice: state %v, news %v, wake %v (was %v), %d wake times; want settled, unchanged, 1",
			r.state, r.news, r.wakeAt, at, len(l.wakes))
	}
	l.onNotice(r, lock.Released) // a rerun: claim again
	if r.state != claiming || len(l.claims) != 1 || len(l.wakes) != 0 {
		t.Errorf("after a rerun notice: state %v, %d claims queued, %d wake times; want claiming, 1, 0",
			r.state, len(l.claims), len(l.wakes))
	}
}

// During the handoff pause after its own failed attempt, a run ignores a
// release notice (its own, published as it released, may arrive after the
// attempt's end): only the pause's end or a completion moves it.
func TestHandoffIgnoresReleaseNotice(t *testing.T) {
	l := testLoop(t, memlock.New(time.Now))
	l.s.handoff.Min, l.s.handoff.Max = time.Hour, time.Hour
	r := l.newRun(&l.s.Tasks()[0], time.Now().Truncate(time.Hour))
	r.state = running // as a won claim leaves it
	l.onNotice(r, lock.Released)
	l.onAttempted(r, lock.Claim{Result: lock.Won, Attempt: 1}, false, nil)
	if r.state != handingOff {
		t.Fatalf("after a failed attempt: state %v, want handing off", r.state)
	}
	at := r.wakeAt
	l.onNotice(r, lock.Released)
	if r.state != handingOff || r.news != noNotice || !r.wakeAt.Equal(at) || len(l.claims) != 0 {
		t.Fatalf("after a release notice in the handoff: state %v, news %v, %d claims queued; want handing off, no news, none",
			r.state, r.news, len(l.claims))
	}
	l.onNotice(r, lock.Completed)
	if r.state != settled || len(l.wakes) != 1 {
		t.Errorf("after a completion in the handoff: state %v, %d wake times; want settled, 1", r.state, len(l.wakes))
	}
}

// The model checker's trail "a rerun notice dropped behind a done notice"
// (docs/model.md, finding 2): a replica's attempt fails; a peer then
// completes the slot and an operator reruns it, the two notices arriving
// before the replica's attempt has reported its end or during its handoff
// pause. Either way the replica claims the rerun: news kept while running
// is dropped only in favour of the pause, which ends in a claim, and in the
// pause a completion settles the run, which a later rerun wakes.
func TestRerunAfterPeerCompletionIsClaimed(t *testing.T) {
	for _, during := range []runState{running, handingOff} {
		t.Run(during.String(), func(t *testing.T) {
			l := testLoop(t, memlock.New(time.Now))
			l.s.handoff.Min, l.s.handoff.Max = time.Hour, time.Hour
			r := l.newRun(&l.s.Tasks()[0], time.Now().Truncate(time.Hour))
			r.state = running            // as a won claim leaves it
			l.onNotice(r, lock.Released) // the replica's own release, as it released
			if during == running {
				l.onNotice(r, lock.Completed) // a peer completed the slot
				l.onNotice(r, lock.Released)  // the operator reran it
			}
			l.onAttempted(r, lock.Claim{Result: lock.Won, Attempt: 1}, false, nil)
			if during == handingOff {
				l.onNotice(r, lock.Completed)
				if r.state != settled {
					t.Fatalf("after a completion in the handoff: state %v, want settled", r.state)
				}
				l.onNotice(r, lock.Released)
			} else {
				if r.state != handingOff {
					t.Fatalf("after the failed attempt: state %v, want handing off", r.state)
				}
				l.unschedule(r)
				l.onWake(r) // the pause ends
			}
			if r.state != claiming || len(l.claims) != 1 {
				t.Errorf("after a completion and a rerun: state %v, %d claims queued; want claiming, 1", r.state, len(l.claims))
			}
		})
	}
}

// The handoff pause ends in a claim; the last allowed attempt's failure
// settles the run instead (exhausted).
func TestHandoffEndsInClaimUnlessExhausted(t *testing.T) {
	l := testLoop(t, memlock.New(time.Now))
	r := l.newRun(&l.s.Tasks()[0], time.Now().Truncate(time.Hour))
	r.state = running
	l.onAttempted(r, lock.Claim{Result: lock.Won, Attempt: 1}, false, nil)
	l.unschedule(r)
	l.onWake(r)
	if r.state != claiming || len(l.claims) != 1 {
		t.Fatalf("after the pause: state %v, %d claims queued; want claiming, 1", r.state, len(l.claims))
	}
	l.claims = nil
	r.state = running
	l.onAttempted(r, lock.Claim{Result: lock.Won, Attempt: 5, Base: 2}, false, nil)
	if r.state != settled {
		t.Errorf("after attempt 3 of 3 failed: state %v, want settled", r.state)
	}
}

// A settled run ends a little after its deadline (expireLag), not at it; a
// rerun announced in between wakes it, and it ends without claiming: no
// attempt starts after the deadline.
func TestRerunAfterDeadlineClaimsNothing(t *testing.T) {
	store := memlock.New(time.Now)
	l := testLoop(t, store)
	r := l.newRun(&l.s.Tasks()[0], time.Now().Truncate(time.Hour))
	r.slot.Deadline = time.Now().Add(100 * time.Millisecond)
	r.state = claiming
	l.onClaimReply(r, lock.ClaimReply{Claim: lock.Claim{Result: lock.Done}})
	for time.Now().Before(r.slot.Deadline) {
		time.Sleep(10 * time.Millisecond) // the clock's own condition, not a race
	}
	l.wakeDue()
	if r.state != settled {
		t.Fatalf("the settled run is %v at its deadline, want settled until the lag", r.state)
	}
	l.onNotice(r, lock.Released) // an operator's rerun, after the deadline
	if r.state != ended || l.live != 0 || len(l.claims) != 0 {
		t.Fatalf("after a rerun past the deadline: state %v, %d live, %d claims queued; want ended, 0, 0",
			r.state, l.live, len(l.claims))
	}
	l.sendClaims()
	l.workers.Wait()
	sts, err := store.States(context.Background(), []lock.Slot{r.slot})
	if err != nil {
		t.Fatal(err)
	}
	if sts[0].Attempts != 0 {
		t.Errorf("state after a rerun past the deadline: %+v, want no claim", sts[0])
	}
}

// Notices go through the mailbox: a watch's notice reaches the loop as an
// event, and one about a run that has ended changes nothing.
func TestNoticeAfterEndIsIgnored(t *testing.T) {
	store := memlock.New(time.Now)
	l := testLoop(t, store)
	r := runAfter(t, l, lock.ClaimReply{Claim: lock.Claim{Result: lock.Held, Wait: time.Hour}}, waiting)
	l.end(r)
	l.onNotice(r, lock.Released)
	l.onWake(r)
	if r.state != ended || len(l.claims) != 0 || len(l.wakes) != 0 || l.live != 0 {
		t.Errorf("after events for an ended run: state %v, %d claims, %d wakes, %d live; want ended, 0, 0, 0",
			r.state, len(l.claims), len(l.wakes), l.live)
	}
}

// At shutdown every waiting or settled run ends at once; a run whose
// attempt is still going ends when the attempt does.
func TestShutdownEndsIdleRuns(t *testing.T) {
	l := testLoop(t, memlock.New(time.Now))
	ctx, cancel := context.WithCancel(context.Background())
	l.ctx = ctx
	w := runAfter(t, l, lock.ClaimReply{Claim: lock.Claim{Result: lock.Held, Wait: time.Hour}}, waiting)
	s := runAfter(t, l, lock.ClaimReply{Claim: lock.Claim{Result: lock.Done}}, settled)
	busy := l.newRun(&l.s.Tasks()[0], time.Now().Truncate(time.Hour))
	busy.state = running
	cancel()
	l.onShutdown()
	if w.state != ended || s.state != ended || busy.state != running || l.live != 1 {
		t.Fatalf("after shutdown: waiting run %v, settled run %v, running run %v, %d live; want ended, ended, running, 1",
			w.state, s.state, busy.state, l.live)
	}
	l.onAttempted(busy, lock.Claim{Result: lock.Won, Attempt: 1}, false, nil)
	if busy.state != ended || l.live != 0 || len(l.wakes) != 0 {
		t.Errorf("after the attempt's end: %v, %d live, %d wake times; want ended, 0, 0", busy.state, l.live, len(l.wakes))
	}
}

// A claim queued in the turn in which shutdown begins is not sent: it
// could win a slot that no attempt would then run.
func TestShutdownSendsNoQueuedClaim(t *testing.T) {
	store := memlock.New(time.Now)
	l := testLoop(t, store)
	ctx, cancel := context.WithCancel(context.Background())
	l.ctx = ctx
	r := l.newRun(&l.s.Tasks()[0], time.Now().Truncate(time.Hour))
	l.advance(r, false)
	if r.state != claiming || len(l.claims) != 1 {
		t.Fatalf("state %v, %d claims queued; want claiming, 1", r.state, len(l.claims))
	}
	cancel()
	l.sendClaims()
	l.workers.Wait()
	if r.state != ended || l.live != 0 {
		t.Errorf("after shutdown: state %v, %d live; want ended, 0", r.state, l.live)
	}
	sts, err := store.States(context.Background(), []lock.Slot{r.slot})
	if err != nil {
		t.Fatal(err)
	}
	if sts[0].Attempts != 0 {
		t.Errorf("slot state %+v, want no claim", sts[0])
	}
}

// After a Redlock round without a quorum the first retry is already
// random (Redlock's random delay); after other errors it is the backoff's
// floor, growing.
func TestClaimRetryJitteredAfterNoQuorum(t *testing.T) {
	s := New(nil, nil)
	noQuorum := fmt.Errorf("claim: %w", redislock.ErrNoQuorum)
	seen := map[time.Duration]bool{}
	for range 200 {
		d := s.claimRetry(noQuorum, 0)
		if d < s.backoff.Min || d > 2*s.backoff.Min {
			t.Fatalf("retry after no quorum = %v, want within [%v, %v]", d, s.backoff.Min, 2*s.backoff.Min)
		}
		seen[d] = true
	}
	if len(seen) < 10 {
		t.Errorf("retry after no quorum took %d distinct values in 200 draws: not random", len(seen))
	}
	if d := s.claimRetry(errors.New("connection refused"), 0); d != s.backoff.Min {
		t.Errorf("first retry after another error = %v, want the floor %v", d, s.backoff.Min)
	}
}

// Passwords are never quoted in errors.

// A claim whose failed reply comes after the deadline leaves its run
// waiting out the lag for news, in the wake heap: at the lag's end the
// store is asked, and as it has the slot free the slot is reported missed
// and the run ends, and a shutdown in the lag ends it too
// (a run left in its claiming state kept a stopping loop alive for ever).
func TestLateFailedClaimReplyEndsAfterTheLag(t *testing.T) {
	for _, stop := range []bool{false, true} {
		l := testLoop(t, memlock.New(time.Now))
		r := l.newRun(&l.s.Tasks()[0], time.Now().Truncate(time.Hour))
		r.state = claiming
		r.slot.Deadline = time.Now().Add(-time.Millisecond)
		l.onClaimReply(r, lock.ClaimReply{Err: errors.New("connection closed")})
		if r.state != waiting || !r.lagged || r.index < 0 {
			t.Fatalf("after a late failed reply: state %v, lagged %v, in the wake heap %v; want waiting, lagged, in it",
				r.state, r.lagged, r.index >= 0)
		}
		if stop {
			l.onShutdown()
		} else {
			l.onWake(r)
			l.sendConfirms() // the store, asked, has the slot free
			handleUntil(t, l, "the read of the slot's state", func() bool { return r.state == ended })
		}
		st := l.s.stats.Task(r.t.Name)
		if r.state != ended || l.live != 0 {
			t.Errorf("stop %v: state %v, %d runs live; want ended, 0", stop, r.state, l.live)
		}
		want := uint64(1) // a stop in the lag reports nothing: nobody knows
		if stop {
			want = 0
		}
		if st.Missed.Load() != want {
			t.Errorf("stop %v: missed %d, want %d", stop, st.Missed.Load(), want)
		}
	}
}

// The fire loop's slot ids are the schedule's, however the tasks due at
// one instant share them: per resolution, and anew for each instant.
func TestFiredSlotIDsAreTheSchedules(t *testing.T) {
	var ids idCache
	hourly, err := schedule.Parse("0 0 * * * *", "")
	if err != nil {
		t.Fatal(err)
	}
	secondly, err := schedule.Parse("* * * * * *", "")
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2024, 1, 15, 14, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		s  *schedule.Schedule
		at time.Time
	}{{hourly, at}, {secondly, at}, {hourly, at}, {secondly, at.Add(time.Second)}, {hourly, at.Add(time.Hour)}, {secondly, at.Add(time.Second + time.Millisecond)}} {
		if got, want := ids.id(c.s, c.at), c.s.SlotID(c.at); got != want {
			t.Errorf("id of %v at %s resolution: %q, want %q", c.at, c.s.Resolution(), got, want)
		}
	}
}

// statesFail is a store whose States cannot answer.
type statesFail struct{ lock.Store }

func (statesFail) States(context.Context, []lock.Slot) ([]lock.State, error) {
	return nil, errors.New("injected: no answer")
}

// A run that heard of no holder and no success by missLag after its
// deadline asks the store before it calls the slot missed, in one read
// for the runs lagged together: a slot a peer ran, or still runs, was not
// missed; a free one was. (Before, a replica whose notices lagged — a
// ZooKeeper ensemble behind a 10,000-slot burst — counted thousands of
// slots missed that its peers had run.) A slot the store cannot read is
// counted missed, as before the read, and so for a while are the next
// lagged runs, unread: a store behind its load is not given more. The
// read is a Peek where the store has one (done or running is all it
// needs), else States.
func TestLaggedRunAsksTheStoreBeforeMissed(t *testing.T) {
	ctx := context.Background()
	for _, unreadable := range []bool{false, true} {
		mem := memlock.New(time.Now)
		store := lock.Store(mem)
		if unreadable {
			store = statesFail{mem}
		}
		l := testLoop(t, store)
		if !unreadable {
			t.Cleanup(l.watchReleases()) // read with Peek, as a loop does on every store but Redlock
		}
		task := &l.s.Tasks()[0]
		now := time.Now()
		slot := func(id string) lock.Slot {
			return lock.Slot{Task: task.Name, ID: id, Time: now.Add(-time.Second), Deadline: now.Add(time.Hour)}
		}
		// A peer ran "done" and runs "held"; nobody claimed "free".
		c, err := mem.Claim(ctx, slot("done"), "peer#1", task.Policy)
		if err != nil || c.Result != lock.Won {
			t.Fatalf("peer's claim: %+v, %v", c, err)
		}
		if err := mem.Complete(ctx, slot("done"), lock.Owner{ID: "peer#1", Attempt: c.Attempt}, task.DoneTTL); err != nil {
			t.Fatal(err)
		}
		if c, err := mem.Claim(ctx, slot("held"), "peer#1", task.Policy); err != nil || c.Result != lock.Won {
			t.Fatalf("peer's claim: %+v, %v", c, err)
		}
		runs := map[string]*run{}
		for _, id := range []string{"done", "held", "free"} {
			// Its claim failed, and the window closed before it heard more.
			r := l.newSlotRun(task, slot(id))
			r.slot.Deadline = now.Add(-time.Millisecond)
			r.state = claiming
			l.onClaimReply(r, lock.ClaimReply{Err: errors.New("connection closed")})
			l.onWake(r) // the lag is over, no notice came
			runs[id] = r
		}
		st := l.s.stats.Task(task.Name)
		if len(l.confirms) != 3 || st.Missed.Load() != 0 {
			t.Fatalf("unreadable %v: at the lag's end %d runs to read, missed %d; want 3, 0", unreadable, len(l.confirms), st.Missed.Load())
		}
		l.sendConfirms()
		handleUntil(t, l, "the read of the slots' states", func() bool { return l.live == 0 })
		want := uint64(1)
		if unreadable {
			want = 3
		}
		if got := st.Missed.Load(); got != want {
			t.Errorf("unreadable %v: missed %d, want %d", unreadable, got, want)
		}
		for id, r := range runs {
			if r.state != ended {
				t.Errorf("unreadable %v: run of %s %v, want ended", unreadable, id, r.state)
			}
		}
		// After a read that failed, the next lagged run is counted
		// missed without one for a while; after one that answered, it
		// is read.
		r := l.newSlotRun(task, slot("later"))
		r.slot.Deadline = now.Add(-time.Millisecond)
		r.state = claiming
		l.onClaimReply(r, lock.ClaimReply{Err: errors.New("connection closed")})
		l.onWake(r)
		if asked := len(l.confirms) == 1; asked == unreadable {
			t.Errorf("unreadable %v: the next lagged run read = %v, want %v", unreadable, asked, !unreadable)
		}
		if unreadable && (r.state != ended || st.Missed.Load() != want+1) {
			t.Errorf("after a failed read: next lagged run %v, missed %d; want ended, %d", r.state, st.Missed.Load(), want+1)
		}
	}
}
