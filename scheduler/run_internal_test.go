package scheduler

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/scheduler/schedule"
	"github.com/slotd/slotd/tasks"
)

// reportTasks is the "report" task with the configuration's defaults: hourly,
// a job that does nothing.
func reportTasks(t *testing.T) []Task {
	t.Helper()
	sched, err := schedule.Parse("0 * * * *", "")
	if err != nil {
		t.Fatal(err)
	}
	return []Task{{
		Name: "report", Spec: "0 * * * *", Plugin: "noop", Params: map[string]any{},
		Policy:  lock.Policy{Lease: 15 * time.Second, DoneTTL: 48 * time.Hour, MaxAttempts: 3},
		Timeout: time.Hour, Catchup: CatchupLatest, Schedule: sched,
		Job: tasks.TaskFunc(func(context.Context) error { return nil }),
	}}
}

// parkedRunAfter makes a run of the "report" task's slot of the current hour
// and feeds it reply as its first claim's, so that it parks as it would
// after a ClaimMany.
func parkedRunAfter(t *testing.T, reply lock.ClaimReply) (*Scheduler, *slotRun) {
	t.Helper()
	s := New(reportTasks(t), lock.NewMemory(time.Now))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() {
		cancel()
		s.unparkAll()
		s.wg.Wait()
		s.stopDeadlines()
	})
	task := &s.tasks[0]
	r := s.newRun(ctx, ctx, task, time.Now().Truncate(time.Hour))
	r.step(&reply)
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.parked {
		t.Fatalf("the run did not park after a %v claim", reply.Result)
	}
	return s, r
}

// parkedState is whether r is parked, and its notice not yet looked at.
func parkedState(r *slotRun) (bool, notice) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.parked, r.news
}

func groupEntries(s *Scheduler, r *slotRun) int {
	s.settledMu.Lock()
	defer s.settledMu.Unlock()
	if g := s.settledRuns[r.slot.Deadline]; g != nil {
		return len(g.runs)
	}
	return 0
}

// A loser parked on its timer (the slot held by a peer) is settled by the
// holder's completion notice in the callback itself: it stays parked, now
// in its deadline's group, with no timer and no goroutine started.
func TestCompletionSettlesParkedRunInPlace(t *testing.T) {
	s, r := parkedRunAfter(t, lock.ClaimReply{Claim: lock.Claim{Result: lock.Held, Wait: time.Hour}})
	if r.timer == nil || r.settled {
		t.Fatalf("after a held claim: timer %v, settled %v; want a timer, not settled", r.timer, r.settled)
	}
	r.wake(true)
	r.mu.Lock()
	parked, settled, timer, news := r.parked, r.settled, r.timer, r.news
	r.mu.Unlock()
	if !parked || !settled || timer != nil || news != noNotice {
		t.Errorf("after the completion: parked %v, settled %v, timer %v, news %v; want parked, settled, no timer, no news",
			parked, settled, timer, news)
	}
	if n := groupEntries(s, r); n != 1 {
		t.Errorf("%d entries in the deadline's group, want 1", n)
	}
}

// A run already settled (its claim found the slot done) ignores a
// completion notice: it is not woken only to park again, which would cost
// a goroutine and a stale entry in its deadline's group. A rerun still
// wakes it.
func TestCompletionLeavesSettledRunParked(t *testing.T) {
	s, r := parkedRunAfter(t, lock.ClaimReply{Claim: lock.Claim{Result: lock.Done}})
	r.wake(true)
	if parked, news := parkedState(r); !parked || news != noNotice {
		t.Errorf("after a completion notice: parked %v, news %v; want parked, no news", parked, news)
	}
	if n := groupEntries(s, r); n != 1 {
		t.Errorf("%d entries in the deadline's group, want 1", n)
	}

	r.wake(false) // a rerun: claim again
	if parked, _ := parkedState(r); parked {
		t.Error("a rerun notice left the settled run parked")
	}
}

// During the handoff pause after its own failed attempt, a run ignores a
// release notice (its own, published as it released, may arrive after it
// parked): only the pause's end or a completion moves it.
func TestHandoffIgnoresReleaseNotice(t *testing.T) {
	s, r := parkedRunAfter(t, lock.ClaimReply{Claim: lock.Claim{Result: lock.Held, Wait: time.Hour}})
	r.mu.Lock()
	r.handingOff = true // as handle leaves it after a failed attempt
	r.mu.Unlock()
	r.wake(false)
	if parked, news := parkedState(r); !parked || news != noNotice {
		t.Fatalf("after a release notice in the handoff: parked %v, news %v; want parked, no news", parked, news)
	}
	r.wake(true)
	r.mu.Lock()
	settled, handingOff := r.settled, r.handingOff
	r.mu.Unlock()
	if !settled || handingOff || groupEntries(s, r) != 1 {
		t.Errorf("after a completion in the handoff: settled %v, handing off %v, %d group entries; want settled, not handing off, 1",
			settled, handingOff, groupEntries(s, r))
	}
}

// A settled run ends a little after its deadline (expireLag), not at it; a
// rerun announced in between wakes it, and it ends without claiming: no
// attempt starts after the deadline.
func TestRerunAfterDeadlineClaimsNothing(t *testing.T) {
	store := lock.NewMemory(time.Now)
	s := New(reportTasks(t), store)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() {
		cancel()
		s.unparkAll()
		s.wg.Wait()
		s.stopDeadlines()
	})
	r := s.newRun(ctx, ctx, &s.tasks[0], time.Now().Truncate(time.Hour))
	r.slot.Deadline = time.Now().Add(100 * time.Millisecond)
	r.step(&lock.ClaimReply{Claim: lock.Claim{Result: lock.Done}})
	for time.Now().Before(r.slot.Deadline) {
		time.Sleep(10 * time.Millisecond) // the clock's own condition, not a race
	}
	if parked, _ := parkedState(r); !parked {
		t.Fatal("the settled run ended at its deadline, want it parked until the lag")
	}
	r.wake(false) // an operator's rerun, after the deadline
	ended := func() bool {
		s.runsMu.Lock()
		defer s.runsMu.Unlock()
		return s.runs == nil
	}
	for deadline := time.Now().Add(5 * time.Second); !ended(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the woken run did not end")
		}
	}
	sts, err := store.States(ctx, []lock.Slot{r.slot})
	if err != nil {
		t.Fatal(err)
	}
	if sts[0].Attempts != 0 {
		t.Errorf("state after a rerun past the deadline: %+v, want no claim", sts[0])
	}
}

// After a Redlock round without a quorum the first retry is already
// random (Redlock's random delay); after other errors it is the backoff's
// floor, growing.
func TestClaimRetryJitteredAfterNoQuorum(t *testing.T) {
	s := New(nil, nil)
	noQuorum := fmt.Errorf("claim: %w", lock.ErrNoQuorum)
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
