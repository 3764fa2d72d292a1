package scheduler

import (
	"context"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/stats"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/memlock"
)

// tallyLoop is batchLoop on a store that records its peeks, with n tasks
// whose lease outlasts their 2 h window, all fired at the hour's start
// and left to "peer".
func tallyLoop(t *testing.T, n int) (*loop, *askedPeeks, []*Task, time.Time) {
	t.Helper()
	store := &askedPeeks{Store: memlock.New(time.Now)}
	l, ts := batchLoop(t, store, n, func(task *Task) { task.Lease = 3 * time.Hour })
	if l.tally.tallier == nil {
		t.Fatal("no tallies kept on a store with lock.Peeker")
	}
	at := time.Now().Truncate(time.Hour)
	for _, task := range ts {
		l.onFire(task, at)
	}
	l.closeFiring()
	return l, store, ts, at
}

// claimAs claims each of ts's slots at at as replica, and returns the sum
// of their hashes, what replica's tally of them is.
func claimAs(t *testing.T, store lock.Store, replica string, ts []*Task, at time.Time) uint64 {
	t.Helper()
	var sum uint64
	for _, task := range ts {
		slot := task.Slot(at)
		if c, err := store.Claim(context.Background(), slot, replica+"#1", task.Policy); err != nil || c.Result != lock.Won {
			t.Fatalf("%s's claim of %s: %+v, %v", replica, slot, c, err)
		}
		sum += slotHash(slot)
	}
	return sum
}

// A deferring replica reads none of the slots whose preferred claimant's
// tally matches its own: they are held, listed until their deadline for a
// release; a release of one is still claimed at once.
func TestSlotsTheirClaimantTalliedAreNotRead(t *testing.T) {
	l, store, ts, at := tallyLoop(t, 3)
	sum := claimAs(t, store, "peer", ts, at)
	if err := store.Tally(context.Background(), at, "peer", sum, time.Minute); err != nil {
		t.Fatal(err)
	}
	d := checkNow(t, l)
	handleUntil(t, l, "the read's answer", func() bool { return readDone(d) })
	if len(store.asked) != 0 {
		t.Fatalf("slots read %v; want none: the claimant's tally covers them", store.asked)
	}
	if len(l.claims) != 0 || len(l.checks) != 1 || !l.checks[0].settled || len(l.byName) != 3 {
		t.Fatalf("after the read: %d claims, %d deferrals, %d listed; want none, 1 settled, 3", len(l.claims), len(l.checks), len(l.byName))
	}
	if err := store.Release(context.Background(), ts[1].Slot(at), lock.Owner{ID: "peer#1", Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	handleUntil(t, l, "the release notice", func() bool { return len(l.claims) == 1 })
	if l.claims[0].slot.Task != "d1" {
		t.Errorf("after d1's release: %s claimed, want d1", l.claims[0].slot)
	}
}

// A tally that differs from this replica's (its claimant left a slot
// unclaimed: another config, another view of the live set, a failed
// claim), or none (a dead claimant), is looked for again at the
// deferral's limit, and then every slot it would cover is read, and the
// free one claimed.
func TestSlotsTheirClaimantDidNotTallyAreRead(t *testing.T) {
	for _, c := range []struct {
		name  string
		tally bool
	}{{"partial tally", true}, {"no tally", false}} {
		t.Run(c.name, func(t *testing.T) {
			l, store, ts, at := tallyLoop(t, 3)
			sum := claimAs(t, store, "peer", ts[:2], at)
			if c.tally {
				if err := store.Tally(context.Background(), at, "peer", sum, time.Minute); err != nil {
					t.Fatal(err)
				}
			}
			d := checkNow(t, l)
			handleUntil(t, l, "the read's answer", func() bool { return d.index >= 0 })
			if len(store.asked) != 0 || len(l.checks) != 1 || l.checks[0] != d || !d.final || !d.checkAt.Equal(d.until) || len(l.byName) != 3 {
				t.Fatalf("first read: slots read %v, %d deferrals, %d listed; want none read, all 3 looked at again at the limit",
					store.asked, len(l.checks), len(l.byName))
			}
			checkNow(t, l) // at the limit
			handleUntil(t, l, "the second read's answer", func() bool { return len(l.claims) == 1 })
			if len(store.asked) != 1 || len(store.asked[0]) != 3 {
				t.Fatalf("slots read %v; want one read of all 3", store.asked)
			}
			if l.claims[0].slot.Task != "d2" {
				t.Errorf("%s claimed, want the free d2", l.claims[0].slot)
			}
		})
	}
}

// With two claimants, one's tally in at the first look and the other's
// not yet: the deferral waits whole for its limit, its slots listed where
// they are and none read, and then both tallies cover their slots, which
// settle unread. Settling the covered half at once would move each of its
// slots to another deferral.
func TestDeferralWaitsWholeForTheTallyNotInYet(t *testing.T) {
	store := &askedPeeks{Store: memlock.New(time.Now)}
	l, ts := batchLoop(t, store, 8, func(task *Task) { task.Lease = 3 * time.Hour })
	l.s.setLive([]string{"peer-a", "peer-b"})
	at := time.Now().Truncate(time.Hour)
	mine := map[string][]*Task{}
	for _, task := range ts {
		by, _ := l.s.claimant(task.Slot(at))
		mine[by] = append(mine[by], task)
		l.onFire(task, at)
	}
	l.closeFiring()
	if len(mine["peer-a"]) == 0 || len(mine["peer-b"]) == 0 {
		t.Fatalf("claimants %v: want both peers to have slots", mine)
	}
	sumA := claimAs(t, store, "peer-a", mine["peer-a"], at)
	sumB := claimAs(t, store, "peer-b", mine["peer-b"], at)
	if err := store.Tally(context.Background(), at, "peer-a", sumA, time.Minute); err != nil {
		t.Fatal(err)
	}
	d := checkNow(t, l)
	handleUntil(t, l, "the read's answer", func() bool { return d.index >= 0 })
	if len(store.asked) != 0 || len(l.checks) != 1 || l.checks[0] != d || !d.final || !d.checkAt.Equal(d.until) || len(d.slots) != len(ts) {
		t.Fatalf("first look: slots read %v, %d deferrals, %d slots in it; want none read, all %d looked at again at the limit",
			store.asked, len(l.checks), len(d.slots), len(ts))
	}
	if err := store.Tally(context.Background(), at, "peer-b", sumB, time.Minute); err != nil {
		t.Fatal(err)
	}
	checkNow(t, l) // at the limit
	handleUntil(t, l, "the second look's answer", func() bool { return readDone(d) })
	if len(store.asked) != 0 || len(l.claims) != 0 || len(l.checks) != 1 || l.checks[0] != d || !d.settled || len(l.byName) != len(ts) {
		t.Fatalf("at the limit: slots read %v, %d claims, %d deferrals; want none read or claimed, the deferral settled where it is",
			store.asked, len(l.claims), len(l.checks))
	}
}

// A release heard before its slot is listed (this replica fired it late)
// has the slot claimed when it fires, not listed: the tally that covers
// it was written before the release, and its notice will not come again.
func TestReleaseHeardBeforeTheFireIsClaimed(t *testing.T) {
	store := memlock.New(time.Now)
	l, ts := batchLoop(t, store, 2, func(task *Task) { task.Lease = 3 * time.Hour })
	at := time.Now().Truncate(time.Hour)
	claimAs(t, store, "peer", ts, at)
	if err := store.Release(context.Background(), ts[0].Slot(at), lock.Owner{ID: "peer#1", Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	handleUntil(t, l, "the release notice", func() bool { return len(l.tally.heard) == 1 })
	for _, task := range ts {
		l.onFire(task, at)
	}
	if len(l.claims) != 1 || l.claims[0].slot.Task != "d0" || len(l.byName) != 1 || len(l.tally.heard) != 0 {
		t.Fatalf("after the fires: %d claims (want d0's), %d listed (want d1), %d notices remembered (want none)",
			len(l.claims), len(l.byName), len(l.tally.heard))
	}
}

// A preferred claimant tallies its slots of one fire time once every claim
// it sent of them is answered taken: won, or found held by a peer. A claim
// answered otherwise leaves no tally, so its peers read the slots.
func TestPreferredClaimantTalliesTakenSlots(t *testing.T) {
	for _, c := range []struct {
		name      string
		exhausted bool
	}{{"taken", false}, {"one exhausted", true}} {
		t.Run(c.name, func(t *testing.T) {
			store := memlock.New(time.Now)
			l, ts := batchLoop(t, store, 3, nil)
			l.s.setLive([]string{l.s.replica})
			var infos []stats.TaskInfo
			for _, task := range ts {
				infos = append(infos, stats.TaskInfo{Name: task.Name})
			}
			l.s.stats.Update(infos)
			at := time.Now().Truncate(time.Hour)
			var want uint64
			for _, task := range ts {
				want += slotHash(task.Slot(at))
			}
			claimAs(t, store, "peer", ts[2:], at) // held by a peer: taken
			if c.exhausted {
				ts[0].MaxAttempts = 1
				slot := ts[0].Slot(at)
				cl, err := store.Claim(context.Background(), slot, "peer#1", ts[0].Policy)
				if err != nil || cl.Result != lock.Won {
					t.Fatalf("peer's claim of %s: %+v, %v", slot, cl, err)
				}
				if err := store.Release(context.Background(), slot, lock.Owner{ID: "peer#1", Attempt: cl.Attempt}); err != nil {
					t.Fatal(err)
				}
			}
			for _, task := range ts {
				l.onFire(task, at)
			}
			l.sendClaims()
			handleUntil(t, l, "the claims' answers", func() bool { return l.pending == 0 })
			l.workers.Wait() // the tally's write
			got, err := store.Tallies(context.Background(), at, []string{l.s.replica})
			if err != nil {
				t.Fatal(err)
			}
			if c.exhausted {
				want = 0
			}
			if got[0] != want {
				t.Fatalf("tally %d, want %d", got[0], want)
			}
		})
	}
}

// A tally that comes in after the deferral's first read (its claimant's
// claims were still out) spares the read at the limit.
func TestTallyInByTheLimitSparesTheRead(t *testing.T) {
	l, store, ts, at := tallyLoop(t, 2)
	d := checkNow(t, l)
	handleUntil(t, l, "the read's answer", func() bool { return d.index >= 0 })
	sum := claimAs(t, store, "peer", ts, at)
	if err := store.Tally(context.Background(), at, "peer", sum, time.Minute); err != nil {
		t.Fatal(err)
	}
	d = checkNow(t, l)
	handleUntil(t, l, "the read's answer at the limit", func() bool { return readDone(d) })
	if len(store.asked) != 0 || len(l.claims) != 0 || len(l.checks) != 1 || !l.checks[0].settled {
		t.Fatalf("slots read %v, %d claims, %d deferrals; want none read or claimed, one settled", store.asked, len(l.claims), len(l.checks))
	}
}

// A deferral's list, emptied at its slots' deadline, is the next turn's:
// a release of a slot no longer listed touches none of the new turn's,
// and a release of one of them is claimed.
func TestReusedListHoldsOnlyItsTurnsSlots(t *testing.T) {
	l, store, ts, at := tallyLoop(t, 3)
	sum := claimAs(t, store, "peer", ts, at)
	if err := store.Tally(context.Background(), at, "peer", sum, time.Minute); err != nil {
		t.Fatal(err)
	}
	d := checkNow(t, l)
	handleUntil(t, l, "the read's answer", func() bool { return readDone(d) })
	checkNow(t, l) // the settled deferral's deadline: its slots are forgotten
	if len(l.byName) != 0 || len(l.spare) != 1 {
		t.Fatalf("after the deadline: %d listed, %d spare lists; want none listed, its list spare", len(l.byName), len(l.spare))
	}
	next := at.Add(time.Hour)
	for _, task := range ts {
		l.onFire(task, next)
	}
	l.closeFiring()
	d2 := l.checks[0]
	if len(l.spare) != 0 || len(d2.slots) != len(ts) || len(l.byName) != len(ts) {
		t.Fatalf("the next turn: %d spare lists, %d slots in its deferral, %d listed; want its list reused for all %d",
			len(l.spare), len(d2.slots), len(l.byName), len(ts))
	}
	if err := store.Release(context.Background(), ts[0].Slot(at), lock.Owner{ID: "peer#1", Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	handleUntil(t, l, "the old slot's release notice", func() bool { return len(l.tally.heard) == 1 })
	if len(l.claims) != 0 || d2.gone != 0 {
		t.Fatalf("an unlisted slot's release: %d claims, %d of the new turn's slots gone; want none", len(l.claims), d2.gone)
	}
	// The next hour's slots cannot be claimed yet, so their release is
	// the notice the store's release channel would post.
	slot := ts[1].Slot(next)
	l.onReleaseNotice(slotName{slot.Task, slot.ID})
	if len(l.claims) != 1 || l.claims[0].slot != slot || d2.gone != 1 {
		t.Fatalf("after the release: %d claims, %d gone; want %s's claim, 1", len(l.claims), d2.gone, slot)
	}
}
