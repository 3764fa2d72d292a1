package scheduler

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/slotd/slotd/internal/etcdtest"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/etcdlock"
	"github.com/slotd/slotd/lock/memlock"
)

// batchLoop is testLoop on store with deferrals batched (as run starts
// them) and n tasks like "report" (hourly, 15 s lease) named d0, d1, …,
// edited by edit; this replica is the preferred claimant of none.
func batchLoop(t *testing.T, store lock.Store, n int, edit func(*Task)) (*loop, []*Task) {
	t.Helper()
	l := testLoop(t, store)
	t.Cleanup(l.watchReleases())
	if l.byName == nil {
		t.Fatal("deferrals not batched on a store with lock.Peeker")
	}
	l.s.setLive([]string{"peer"})
	var ts []*Task
	for i := range n {
		task := l.s.Tasks()[0]
		task.Name = fmt.Sprintf("d%d", i)
		if edit != nil {
			edit(&task)
		}
		l.current[task.Name] = &task
		ts = append(ts, &task)
	}
	return l, ts
}

// handleUntil hands the loop's events to it until cond holds.
func handleUntil(t *testing.T, l *loop, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for !cond() {
		select {
		case <-l.inbox.ready:
			for _, e := range l.inbox.take(nil) {
				l.handle(e)
			}
		case <-deadline:
			t.Fatalf("not within 10s: %s", what)
		}
	}
}

// checkNow sends the read of the first deferral at once.
func checkNow(t *testing.T, l *loop) *deferral {
	t.Helper()
	if len(l.checks) == 0 {
		t.Fatal("no deferral to check")
	}
	d := l.checks[0]
	d.checkAt = time.Now()
	l.checkDue()
	if d.index >= 0 {
		t.Fatal("the deferral due was not read")
	}
	return d
}

// Slots a replica leaves to their preferred claimant cost it no run and
// no watch: they are listed together, and one read after the deferral
// says which to claim (free), to forget (done) and to read again when the
// holder's lease runs out (held); a release of a held one claims it at
// once.
func TestDeferredSlotsAreReadInOneBatch(t *testing.T) {
	store := memlock.New(time.Now)
	l, ts := batchLoop(t, store, 3, nil)
	at := time.Now().Truncate(time.Hour)
	for _, task := range ts {
		l.onFire(task, at)
	}
	if l.live != 0 || len(l.wakes) != 0 || len(l.claims) != 0 {
		t.Fatalf("after the fires: %d runs, %d waiting, %d claims; want none (a list only)", l.live, len(l.wakes), len(l.claims))
	}
	l.closeFiring()
	if len(l.checks) != 1 || len(l.checks[0].slots) != 3 || len(l.byName) != 3 {
		t.Fatalf("after the turn: %d deferrals, %d slots listed; want 1 of 3", len(l.checks), len(l.byName))
	}
	if w := time.Until(l.checks[0].checkAt); w > preferWait {
		t.Fatalf("the read goes out in %v, want within preferWait %v", w, preferWait)
	}

	// The preferred claimant ("peer") finished d0 and holds d1; d2 is free.
	ctx := context.Background()
	done, held := ts[0].Slot(at), ts[1].Slot(at)
	c, err := store.Claim(ctx, done, "peer#1", ts[0].Policy)
	if err != nil || c.Result != lock.Won {
		t.Fatalf("peer's claim: %+v, %v", c, err)
	}
	if err := store.Complete(ctx, done, lock.Owner{ID: "peer#1", Attempt: c.Attempt}, time.Hour); err != nil {
		t.Fatal(err)
	}
	hc, err := store.Claim(ctx, held, "peer#1", ts[1].Policy)
	if err != nil || hc.Result != lock.Won {
		t.Fatalf("peer's claim: %+v, %v", hc, err)
	}

	d := checkNow(t, l)
	handleUntil(t, l, "the read's answer", func() bool { return readDone(d) })
	if len(l.claims) != 0 || len(l.checks) != 3 || len(l.byName) != 3 {
		t.Fatalf("after the read: %d claims queued, %d deferrals, %d listed; want none, d0's, d1's and d2's", len(l.claims), len(l.checks), len(l.byName))
	}
	// The free d2 is looked at again at the deferral's limit (its
	// claimant may be late), the held d1 when its lease runs out; the done
	// d0 stays listed, unread, until its deadline, for a rerun.
	byTask := map[string]*deferral{}
	for _, x := range l.checks {
		byTask[x.slots[0].slot.Task] = x
	}
	free, heldAgain, settled := byTask["d2"], byTask["d1"], byTask["d0"]
	if settled == nil || !settled.settled || len(settled.slots) != 1 {
		t.Fatalf("after the read: d0's deferral %+v, want it settled, alone", settled)
	}
	if w := time.Until(settled.checkAt); w < time.Until(done.Deadline)-time.Second || w > time.Until(done.Deadline)+time.Second {
		t.Errorf("d0 forgotten in %v, want at its deadline, in %v", w, time.Until(done.Deadline))
	}
	if len(free.slots) != 1 || free.slots[0].slot.Task != "d2" || !free.checkAt.Equal(d.until) {
		t.Fatalf("after the read: first deferral %+v, want d2's at the limit %v", free.slots, d.until)
	}
	if len(heldAgain.slots) != 1 || heldAgain.slots[0].slot.Task != "d1" {
		t.Fatalf("after the read: second deferral %+v, want d1's", heldAgain.slots)
	}
	if w := time.Until(heldAgain.checkAt); w < ts[1].Lease-time.Second || w > ts[1].Lease+recheckAfter {
		t.Errorf("held d1 read again in %v, want when its %v lease runs out", w, ts[1].Lease)
	}
	// Still free at the limit: claimed.
	checkNow(t, l)
	handleUntil(t, l, "the second read's answer", func() bool { return len(l.claims) == 1 })
	if l.claims[0].slot.Task != "d2" || l.live != 1 || len(l.checks) != 2 || len(l.byName) != 2 {
		t.Fatalf("at the limit: %s claimed, %d runs, %d deferrals, %d listed; want d2's, 1, d0's and d1's", l.claims[0].slot, l.live, len(l.checks), len(l.byName))
	}

	// Its holder fails and releases it: claimed at once.
	if err := store.Release(ctx, held, lock.Owner{ID: "peer#1", Attempt: hc.Attempt}); err != nil {
		t.Fatal(err)
	}
	handleUntil(t, l, "the release notice", func() bool { return len(l.claims) == 2 })
	if r := l.claims[1]; r.slot.Task != "d1" || r.state != claiming {
		t.Errorf("after the release: %s's run %v, want d1's claiming", r.slot, r.state)
	}
	if len(l.checks) != 1 || len(l.byName) != 1 {
		t.Errorf("after the release: %d deferrals, %d listed; want d0's alone", len(l.checks), len(l.byName))
	}

	// An operator reruns the done d0, whose runner may be gone: claimed
	// here at once.
	if _, err := store.Rerun(ctx, done, false); err != nil {
		t.Fatal(err)
	}
	handleUntil(t, l, "the rerun's notice", func() bool { return len(l.claims) == 3 })
	if r := l.claims[2]; r.slot.Task != "d0" || r.state != claiming {
		t.Errorf("after the rerun: %s's run %v, want d0's claiming", r.slot, r.state)
	}
	if len(l.checks) != 0 || len(l.byName) != 0 {
		t.Errorf("after the rerun: %d deferrals, %d listed; want none", len(l.checks), len(l.byName))
	}
}

// A settled deferral's time, its slots' deadline, forgets them unread.
func TestSettledDeferralForgottenAtItsDeadline(t *testing.T) {
	store := memlock.New(time.Now)
	l, ts := batchLoop(t, store, 1, nil)
	at := time.Now().Truncate(time.Hour)
	l.onFire(ts[0], at)
	l.closeFiring()
	slot := ts[0].Slot(at)
	ctx := context.Background()
	c, err := store.Claim(ctx, slot, "peer#1", ts[0].Policy)
	if err != nil || c.Result != lock.Won {
		t.Fatalf("peer's claim: %+v, %v", c, err)
	}
	if err := store.Complete(ctx, slot, lock.Owner{ID: "peer#1", Attempt: c.Attempt}, time.Hour); err != nil {
		t.Fatal(err)
	}
	d := checkNow(t, l)
	handleUntil(t, l, "the read's answer", func() bool { return readDone(d) })
	if len(l.checks) != 1 || !l.checks[0].settled {
		t.Fatalf("after the read: %d deferrals; want one, settled", len(l.checks))
	}
	checkNow(t, l)
	if len(l.checks) != 0 || len(l.byName) != 0 || len(l.claims) != 0 {
		t.Errorf("at its time: %d deferrals, %d listed, %d claims; want none, unread", len(l.checks), len(l.byName), len(l.claims))
	}
}

// A slot whose holder stopped renewing (dead, or frozen) is read again
// when the lease read from the store runs out, and then claimed: taken
// over within lease + 100 ms.
func TestDeferredHeldSlotTakenOverWhenLeaseEnds(t *testing.T) {
	store := memlock.New(time.Now)
	const lease = 300 * time.Millisecond
	l, ts := batchLoop(t, store, 1, func(t *Task) { t.Lease = lease })
	at := time.Now().Truncate(time.Hour)
	l.onFire(ts[0], at)
	l.closeFiring()
	c, err := store.Claim(context.Background(), ts[0].Slot(at), "peer#1", ts[0].Policy)
	if err != nil || c.Result != lock.Won {
		t.Fatalf("peer's claim: %+v, %v", c, err)
	}
	expiry := time.Now().Add(lease) // at the latest: the claim was before
	d := checkNow(t, l)
	handleUntil(t, l, "the read's answer", func() bool { return readDone(d) })
	if len(l.checks) != 1 || len(l.claims) != 0 {
		t.Fatalf("after the read: %d deferrals, %d claims; want the held slot to read again, no claim", len(l.checks), len(l.claims))
	}
	again := l.checks[0].checkAt
	if late := again.Sub(expiry); late < -lease/2 || late > 100*time.Millisecond {
		t.Fatalf("read again %v after the lease ends, want within 100 ms of it", late)
	}
	time.Sleep(time.Until(again))
	l.checkDue()
	handleUntil(t, l, "the second read's answer", func() bool { return len(l.claims) == 1 })
	if took := time.Since(expiry); took > 100*time.Millisecond {
		t.Logf("claimed %v after the lease ended (a loaded machine's scheduling)", took)
	}
	if len(l.checks) != 0 || len(l.byName) != 0 {
		t.Errorf("after the takeover's claim: %d deferrals, %d listed; want none", len(l.checks), len(l.byName))
	}
}

// While this replica's own claims are pending a deferral's read waits for
// them (within its limit), then goes out preferWait later, as a deferring
// run's claim did.
func TestDeferredReadWaitsForPendingClaims(t *testing.T) {
	l, ts := batchLoop(t, memlock.New(time.Now), 1, nil)
	l.onFire(ts[0], time.Now().Truncate(time.Hour))
	l.closeFiring()
	d := l.checks[0]
	d.checkAt = time.Now()
	l.pending = 3
	l.checkDue()
	if d.index < 0 || len(l.heldChecks) != 1 || d.checkAt.Sub(d.until).Abs() > time.Millisecond {
		t.Fatalf("with claims pending: read %v, %d held back, due %v from its limit; want held back to it",
			d.index < 0, len(l.heldChecks), d.checkAt.Sub(d.until))
	}
	l.releaseChecks()
	if len(l.heldChecks) != 1 {
		t.Fatal("released while claims are pending")
	}
	l.pending = 0
	l.releaseChecks()
	if w := time.Until(d.checkAt); len(l.heldChecks) != 0 || w > preferWait {
		t.Fatalf("once none is pending: %d held back, read in %v; want 0, within %v", len(l.heldChecks), w, preferWait)
	}
	// At its limit the read goes out whatever is pending.
	d.checkAt, d.until = time.Now(), time.Now()
	l.pending = 3
	l.checkDue()
	if d.index >= 0 {
		t.Error("at its limit, with claims pending: not read")
	}
}

// failingPeeks is a memory store whose Peek reads fail.
type failingPeeks struct{ *memlock.Store }

func (failingPeeks) Peek(context.Context, []lock.Slot, []bool) ([]lock.State, error) {
	return nil, errors.New("store unreachable")
}

// A read that fails claims every slot it listed: each claim then retries
// as a run's does.
func TestDeferredReadFailureClaimsEverySlot(t *testing.T) {
	l, ts := batchLoop(t, failingPeeks{memlock.New(time.Now)}, 2, nil)
	at := time.Now().Truncate(time.Hour)
	for _, task := range ts {
		l.onFire(task, at)
	}
	l.closeFiring()
	d := checkNow(t, l)
	handleUntil(t, l, "the read's answer", func() bool { return readDone(d) })
	if len(l.claims) != 2 || len(l.byName) != 0 {
		t.Errorf("after a failed read: %d claims queued, %d listed; want 2, none", len(l.claims), len(l.byName))
	}
}

// A store without lock.Peeker (Redlock) defers with a run per
// slot, as before.
func TestDeferringWithoutPeekerIsARun(t *testing.T) {
	l := testLoop(t, struct{ lock.Store }{memlock.New(time.Now)})
	l.watchReleases()
	if l.byName != nil {
		t.Fatal("deferrals batched on a store that cannot report every release")
	}
	deferredRun(t, l)
}

// A shutdown forgets every listed slot.
func TestShutdownForgetsDeferrals(t *testing.T) {
	l, ts := batchLoop(t, memlock.New(time.Now), 1, nil)
	l.onFire(ts[0], time.Now().Truncate(time.Hour))
	l.onShutdown()
	if len(l.checks) != 0 || len(l.byName) != 0 || l.firing != nil {
		t.Errorf("after shutdown: %d deferrals, %d listed; want none", len(l.checks), len(l.byName))
	}
}

// BenchmarkDeferral measures what a slot left to its preferred claimant
// costs a replica, in CPU and allocations, 1000 slots an iteration, each
// already done by its claimant: batched (a list entry, and its share of one
// batched read: lock.Peeker) against a run per slot (a run, a store watch,
// a wake, its completion notice handled, its end), the path of a store
// without lock.Peeker and of every store before. On the memory
// store the figure is the engine's own; on etcd (3 members) it adds the
// client's share of the read (batch) or of registering the slot's watch
// (run) — not the watch's events, which every replica decodes either way.
//
//	go test -run '^$' -bench Deferral -benchmem ./scheduler/
func BenchmarkDeferral(b *testing.B) {
	b.Run("memory", func(b *testing.B) { benchDeferral(b, memlock.New(time.Now)) })
	b.Run("etcd", func(b *testing.B) {
		c := etcdtest.Start(b, 3)
		cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), Logger: zap.NewNop()})
		if err != nil {
			b.Fatal(err)
		}
		s := etcdlock.New(cli, "slotd")
		b.Cleanup(func() { s.Close(); cli.Close() })
		benchDeferral(b, s)
	})
}

func benchDeferral(b *testing.B, store lock.Store) {
	const n = 1000
	at := time.Now().Truncate(time.Hour)
	tasks := make([]Task, n)
	ctx := context.Background()
	sem := make(chan struct{}, 100) // the claimant's slots, claimed and done as a burst would be
	errs := make(chan error, n)
	for i := range tasks {
		tasks[i] = testLoop(&testing.T{}, store).s.Tasks()[0]
		tasks[i].Name = fmt.Sprintf("b%04d", i)
		// A lease past the 2 h window, as a one-second task's 15 s
		// lease is past its window: a tally covers such slots.
		tasks[i].Lease = 3 * time.Hour
		sem <- struct{}{}
		go func(task Task) {
			defer func() { <-sem }()
			c, err := store.Claim(ctx, task.Slot(at), "peer#1", task.Policy)
			if err == nil && c.Result == lock.Won {
				err = store.Complete(ctx, task.Slot(at), lock.Owner{ID: "peer#1", Attempt: c.Attempt}, time.Hour)
			}
			errs <- err
		}(tasks[i])
	}
	for range n {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	// tallied: the claimant's tally covers the slots (tally.go); batch:
	// they are read (no tally kept); run: a run per slot (no lock.Peeker).
	if tl, ok := store.(lock.Peeker); ok {
		var sum uint64
		for i := range tasks {
			sum += slotHash(tasks[i].Slot(at))
		}
		if err := tl.Tally(ctx, at, "peer", sum, time.Hour); err != nil {
			b.Fatal(err)
		}
	}
	for _, mode := range []string{"tallied", "batch", "run"} {
		b.Run(mode, func(b *testing.B) {
			t := &testing.T{}
			var l *loop
			if mode != "run" {
				l = testLoop(t, store)
				defer l.watchReleases()()
				if mode == "batch" {
					l.tally = tallies{}
				}
			} else {
				l = testLoop(t, struct{ lock.Store }{store})
			}
			l.s.setLive([]string{"peer"})
			ts := make([]*Task, n)
			for i := range ts {
				ts[i] = &tasks[i]
				l.current[ts[i].Name] = ts[i]
			}
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := processCPU(b)
			for range b.N {
				for _, task := range ts {
					l.onFire(task, at)
				}
				if mode != "run" {
					l.closeFiring()
					d := l.checks[0]
					d.checkAt = time.Now()
					l.checkDue()
					for !readDone(d) {
						<-l.inbox.ready
						for _, e := range l.inbox.take(nil) {
							l.handle(e)
						}
					}
					if mode == "tallied" && (len(l.checks) != 1 || !l.checks[0].settled) {
						b.Fatal("the claimant's tally did not cover the slots")
					}
					// done slots stay listed until their deadline: forget them
					for len(l.checks) > 0 {
						l.unlist(heap.Pop(&l.checks).(*deferral))
					}
					clear(l.tally.expect) // the next turn fires the same slots again
					continue
				}
				for len(l.wakes) > 0 {
					r := l.wakes[len(l.wakes)-1]
					l.onNotice(r, lock.Completed) // as its watch would post it
					l.end(r)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64((processCPU(b)-cpu0).Nanoseconds())/float64(b.N*n), "cpu-ns/slot")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/slot")
			if l.live != 0 || len(l.claims) != 0 {
				b.Fatalf("%d runs, %d claims left: the slots were not all found done", l.live, len(l.claims))
			}

		})
	}
}

// processCPU is the CPU time this process has used (user and system): a
// read's wait for the store costs wall time, not CPU.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// A slot held under a lease that outlasts its window stays listed,
// unread, until its deadline: if its holder releases it (fails, or shuts
// down), this replica claims it at once (the batched deferral dropped it,
// and a SIGTERMed winner's slot waited for the next slot:
// integration's TestSigtermWinnerHandsOver).
func TestDeferredSlotHeldPastItsWindowIsClaimedOnRelease(t *testing.T) {
	store := memlock.New(time.Now)
	l, ts := batchLoop(t, store, 1, nil)
	at := time.Now().Truncate(time.Hour)
	l.onFire(ts[0], at)
	l.closeFiring()
	slot := ts[0].Slot(at)
	p := ts[0].Policy
	p.Lease = 3 * time.Hour // past the slot's deadline (2 h from the hour)
	ctx := context.Background()
	c, err := store.Claim(ctx, slot, "peer#1", p)
	if err != nil || c.Result != lock.Won {
		t.Fatalf("peer's claim: %+v, %v", c, err)
	}
	d := checkNow(t, l)
	handleUntil(t, l, "the read's answer", func() bool { return readDone(d) })
	if len(l.checks) != 1 || !l.checks[0].settled || len(l.byName) != 1 || len(l.claims) != 0 {
		t.Fatalf("after the read: %d deferrals, %d listed, %d claims; want it listed unread, no claim", len(l.checks), len(l.byName), len(l.claims))
	}
	if err := store.Release(ctx, slot, lock.Owner{ID: "peer#1", Attempt: c.Attempt}); err != nil {
		t.Fatal(err)
	}
	handleUntil(t, l, "the release notice", func() bool { return len(l.claims) == 1 })
	if r := l.claims[0]; r.slot != slot || r.state != claiming {
		t.Errorf("after the release: %s's run %v, want %s's claiming", r.slot, r.state, slot)
	}
}

// readDone reports whether d's read was answered: its slots moved on, or
// it lists them all, settled, until their deadline (settleWhole).
func readDone(d *deferral) bool { return d.slots == nil || d.settled }
