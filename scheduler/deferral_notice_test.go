package scheduler

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/redislock"
)

// peekedSlots records the slots each Peek of a Redis store read.
type peekedSlots struct {
	*redislock.Store
	mu     sync.Mutex
	peeked [][]string // task names, a read each
}

func (p *peekedSlots) Peek(ctx context.Context, slots []lock.Slot, ttl []bool) ([]lock.State, error) {
	var names []string
	for _, s := range slots {
		names = append(names, s.Task)
	}
	p.mu.Lock()
	p.peeked = append(p.peeked, names)
	p.mu.Unlock()
	return p.Store.Peek(ctx, slots, ttl)
}

// On Redis every replica hears each won claim and completion on the done
// channel: a deferring replica that heard them settles those slots as its
// read would have, and reads only the rest. A won claim settles a slot
// only where its lease outlasts the window; a completion always. A slot
// settled so is still listed until its deadline: an operator's rerun of it
// is claimed at once.
func TestNoticesSettleDeferredSlotsBeforeTheirRead(t *testing.T) {
	rdb := redistest.Start(t).Client()
	store := &peekedSlots{Store: redislock.New(rdb, "slotd")}
	peer := redislock.New(rdb, "slotd")
	ctx := context.Background()
	if _, err := peer.Announce(ctx, "peer", "peer#1", time.Minute); err != nil {
		t.Fatal(err) // from now on its won claims are announced
	}
	if err := store.Subscribe(ctx); err != nil {
		t.Fatal(err)
	}
	l, ts := batchLoop(t, store, 4, func(task *Task) {
		if task.Name == "d0" {
			task.Lease = 2 * time.Hour // past the hourly slot's deadline
		}
	})
	at := time.Now().Truncate(time.Hour)
	for _, task := range ts {
		l.onFire(task, at)
	}
	l.closeFiring()

	// The peer wins d0 (its lease outlasts the window), d1 (its lease
	// does not) and d2, which it completes; d3 stays free.
	claims := map[string]lock.Claim{}
	for _, task := range ts[:3] {
		c, err := peer.Claim(ctx, task.Slot(at), "peer#1", task.Policy)
		if err != nil || c.Result != lock.Won {
			t.Fatalf("peer's claim of %s: %+v, %v", task.Name, c, err)
		}
		claims[task.Name] = c
	}
	if err := peer.Complete(ctx, ts[2].Slot(at), lock.Owner{ID: "peer#1", Attempt: claims["d2"].Attempt}, time.Hour); err != nil {
		t.Fatal(err)
	}
	settled := func(name string) bool {
		ref, ok := l.byName[slotName{name, ts[0].Slot(at).ID}]
		return ok && ref.d.settled
	}
	handleUntil(t, l, "d0's won claim and d2's completion heard", func() bool { return settled("d0") && settled("d2") })
	if settled("d1") {
		t.Fatal("d1 settled by its won claim; want it read: its lease may end within its window")
	}

	d := checkNow(t, l)
	handleUntil(t, l, "the read's answer", func() bool { return d.slots == nil })
	store.mu.Lock()
	peeked := store.peeked
	store.mu.Unlock()
	if len(peeked) != 1 || !slices.Equal(peeked[0], []string{"d1", "d3"}) {
		t.Fatalf("reads %v; want one, of d1 and d3 (d0 and d2 were heard)", peeked)
	}
	if len(l.claims) != 0 || len(l.byName) != 4 {
		t.Fatalf("after the read: %d claims, %d listed; want none, all 4", len(l.claims), len(l.byName))
	}

	// The operator reruns the done d2: its release is heard, and claimed.
	if r, err := peer.Rerun(ctx, ts[2].Slot(at), false); err != nil || !r.Cleared {
		t.Fatalf("rerun of d2: %+v, %v", r, err)
	}
	handleUntil(t, l, "the rerun's release", func() bool { return len(l.claims) == 1 })
	if r := l.claims[0]; r.slot.Task != "d2" || r.state != claiming {
		t.Errorf("after the rerun: %s's run %v, want d2's claiming", r.slot, r.state)
	}
}

// A release notice wakes the loop (its slot is claimed at once); a won
// claim's or a completion's waits for the loop's next turn, unless
// noticeWake of them are queued: on Redis each message of a peer's claims
// or completions reaches every replica.
func TestOnlyReleaseNoticesWakeTheLoop(t *testing.T) {
	m := newMailbox()
	woken := func() bool {
		select {
		case <-m.ready:
			return true
		default:
			return false
		}
	}
	m.notice(slotNotice{slotName{"a", "1"}, lock.Taken})
	m.notice(slotNotice{slotName{"a", "1"}, lock.Completed})
	if woken() {
		t.Fatal("a won claim's or a completion's notice woke the loop")
	}
	m.notice(slotNotice{slotName{"b", "1"}, lock.Released})
	if !woken() {
		t.Fatal("a release notice did not wake the loop")
	}
	if n := len(m.takeNotices(nil)); n != 3 {
		t.Fatalf("%d notices taken, want all 3", n)
	}
	for i := range noticeWake - 1 {
		m.notice(slotNotice{slotName{"c", fmt.Sprint(i)}, lock.Completed})
	}
	if woken() {
		t.Fatalf("%d notices woke the loop, want %d to", noticeWake-1, noticeWake)
	}
	m.notice(slotNotice{slotName{"c", "last"}, lock.Completed})
	if !woken() {
		t.Fatalf("%d notices queued and the loop not woken", noticeWake)
	}
}
