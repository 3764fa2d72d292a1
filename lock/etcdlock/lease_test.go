package etcdlock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/slotd/slotd/internal/etcdtest"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/etcdlock"
	"github.com/slotd/slotd/lock/locktest"
)

func slotsOf(t *testing.T, h locktest.Harness, n int) []lock.Slot {
	out := make([]lock.Slot, n)
	for i := range out {
		out[i] = locktest.UniqueSlot(t, h)
	}
	return out
}

// The leases of a burst: three hundred slots won by one replica share a
// few running leases and a few bucket leases, each lease carrying at most
// KeysPerLease claims or writes (etcd 3.4 checks a put on a lease against
// every key on it); their renewals share a few keepalives; and a slot's
// completion goes on the bucket lease its claim put the attempts counter
// on, so the counter is not written again.
func TestBurstSharesLeases(t *testing.T) {
	c := etcdtest.Start(t, 3)
	h := harness(t, c)
	cli := client(t, c.Endpoints())
	ctx := context.Background()
	slots := slotsOf(t, h, 300)
	before, err := cli.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A lease long enough that no hold runs out while the race detector
	// and a loaded machine slow the two hundred claims: this test counts
	// leases, it does not time them.
	p := policy
	p.Lease = 30 * time.Second
	reqs := make([]lock.ClaimRequest, len(slots))
	for i, s := range slots {
		reqs[i] = lock.ClaimRequest{Slot: s, Owner: "r#1", Policy: p}
	}
	lock.ClaimMany(ctx, h.Store, reqs, func(i int, r lock.ClaimReply) {
		if r.Err != nil || r.Result != lock.Won || r.Revision <= 0 {
			t.Errorf("claim %d = %+v, %v", i, r.Claim, r.Err)
		}
	})
	// renewals at one instant, as the watchdogs' shared grid makes them,
	// then the completions
	for _, op := range []func(lock.Slot) error{
		func(s lock.Slot) error {
			return h.Store.Renew(ctx, s, lock.Owner{ID: "r#1", Attempt: 1}, p.Lease)
		},
		func(s lock.Slot) error {
			return h.Store.Complete(ctx, s, lock.Owner{ID: "r#1", Attempt: 1}, p.DoneTTL)
		},
	} {
		var wg sync.WaitGroup
		for _, s := range slots {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := op(s); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
	}
	after, err := cli.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// ceil(300/K) running leases; the done buckets' writes are the 300
	// claims' (the completions join their claims' leases), plus one more
	// lease if the burst straddles a bucket's end
	k := etcdlock.KeysPerLease
	running := (len(slots) + k - 1) / k
	most := 2*running + 1
	if n := len(after.Leases) - len(before.Leases); n < 2 || n > most {
		t.Fatalf("%d leases for a burst of %d slots, want 2..%d", n, len(slots), most)
	}
	was := map[clientv3.LeaseID]bool{}
	for _, l := range before.Leases {
		was[l.ID] = true
	}
	for _, l := range after.Leases {
		if was[l.ID] {
			continue
		}
		ttl, err := cli.TimeToLive(ctx, l.ID, clientv3.WithAttachedKeys())
		if err != nil {
			t.Fatal(err)
		}
		if len(ttl.Keys) > 3*k {
			t.Errorf("lease %x carries %d keys, want at most %d", l.ID, len(ttl.Keys), 3*k)
		}
	}
	// The store's buckets are counted from its start, and a done TTL of an
	// hour is 64 buckets of 56 s: a completion's bucket is its claim's
	// unless this test ran for 56 s.
	for _, s := range slots {
		_, attempts := etcdlock.Keys("slotd", s)
		st, err := cli.Get(ctx, stateKey(s))
		if err != nil {
			t.Fatal(err)
		}
		at, err := cli.Get(ctx, attempts)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Kvs) != 1 || len(at.Kvs) != 1 {
			t.Fatalf("%s: state %v, attempts %v", s, st.Kvs, at.Kvs)
		}
		if st.Kvs[0].Lease != at.Kvs[0].Lease || at.Kvs[0].Version != 1 {
			t.Errorf("%s: done marker on lease %x, attempts on %x at version %d: want one lease, the counter written once",
				s, st.Kvs[0].Lease, at.Kvs[0].Lease, at.Kvs[0].Version)
		}
	}
}

// A replica's lease lost is every hold under it lost: after the lease is
// revoked (as it expires when the replica is cut off), each slot's Renew
// answers ErrNotHeld, and a peer wins each slot with a higher token.
func TestReplicaLeaseLostLosesEveryHold(t *testing.T) {
	c := etcdtest.Start(t, 3)
	h := harness(t, c)
	cli := client(t, c.Endpoints())
	ctx := context.Background()
	slots := slotsOf(t, h, 3)
	for _, s := range slots {
		mustWin(t, h, s, "a#1")
	}
	st, _ := cli.Get(ctx, stateKey(slots[0]))
	if _, err := cli.Revoke(ctx, clientv3.LeaseID(st.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	for _, s := range slots {
		if err := h.Store.Renew(ctx, s, lock.Owner{ID: "a#1", Attempt: 1}, policy.Lease); !errors.Is(err, lock.ErrNotHeld) {
			t.Errorf("renew of %s after the lease's loss: %v, want ErrNotHeld", s, err)
		}
		if b := mustWin(t, h, s, "b#1"); lock.Token(s.Time, b.Attempt) <= lock.Token(s.Time, 1) {
			t.Errorf("peer's token %d not above the lost holder's", lock.Token(s.Time, b.Attempt))
		}
	}
	// and the replica claims again on a new lease
	if c := mustWin(t, h, locktest.UniqueSlot(t, h), "a#1"); c.Attempt != 1 {
		t.Fatalf("claim after the loss = %+v", c)
	}
}

// One task's lease lost while the replica's lease lives on (another slot
// keeps renewing it): the abandoned slot frees a lease after its last
// renewal, as on Redis, and a peer takes it; the renewed slot stays held.
func TestAbandonedHoldFreesAfterItsLease(t *testing.T) {
	c := etcdtest.Start(t, 3)
	h := harness(t, c)
	ctx := context.Background()
	kept, abandoned := locktest.UniqueSlot(t, h), locktest.UniqueSlot(t, h)
	w := h.Store.Watch(abandoned)
	defer w.Stop()
	mustWin(t, h, kept, "a#1")
	won := time.Now()
	mustWin(t, h, abandoned, "a#1")
	owner := lock.Owner{ID: "a#1", Attempt: 1}
	deadline := time.Now().Add(3 * policy.Lease)
	for freed := false; !freed; {
		select {
		case <-w.C():
			freed = true
		case <-time.After(policy.Lease / 4):
			if err := h.Store.Renew(ctx, kept, owner, policy.Lease); err != nil {
				t.Fatalf("renew of the kept slot: %v", err)
			}
			if time.Now().After(deadline) {
				t.Fatal("the abandoned slot was not freed within three leases")
			}
		}
	}
	if took := time.Since(won); took < policy.Lease {
		t.Fatalf("the abandoned slot freed after %v, before its lease %v", took, policy.Lease)
	}
	mustWin(t, h, abandoned, "b#1")
	if st, err := lock.ReadState(ctx, h.Store, kept); err != nil || st.Status != "running" || st.Holder != "a" {
		t.Fatalf("kept slot = %+v, %v; want still running by a", st, err)
	}
}

// A claim whose reply was lost (the connection dropped, or its ctx ended,
// after etcd committed it) is found again by the replica's next claim: it
// wins with the attempt and revision it was written with, and holds it as
// a fresh claim would, rather than finding the slot held by its own key,
// which the replica's other slots keep alive, for the rest of the window.
func TestClaimWithLostReplyIsFoundAgain(t *testing.T) {
	c := etcdtest.Start(t, 1)
	h := harness(t, c)
	ctx := context.Background()
	kept, lostReply := locktest.UniqueSlot(t, h), locktest.UniqueSlot(t, h)
	mustWin(t, h, kept, "a#1")
	first := mustWin(t, h, lostReply, "a#1")
	etcdlock.LoseReply(h.Store.(*etcdlock.Store), lostReply)
	again := mustWin(t, h, lostReply, "a#1")
	if again.Attempt != first.Attempt || again.Revision != first.Revision {
		t.Fatalf("claim found again = %+v, want attempt %d at revision %d", again, first.Attempt, first.Revision)
	}
	owner := lock.Owner{ID: "a#1", Attempt: first.Attempt}
	if err := h.Store.Renew(ctx, lostReply, owner, policy.Lease); err != nil {
		t.Fatalf("renew of the claim found again: %v", err)
	}
	if b, err := h.Store.Claim(ctx, lostReply, "b#1", policy); err != nil || b.Result != lock.Held || b.Holder != "a" {
		t.Fatalf("peer's claim = %+v, %v; want held by a", b, err)
	}
	if err := h.Store.Complete(ctx, lostReply, owner, policy.DoneTTL); err != nil {
		t.Fatalf("completing the claim found again: %v", err)
	}
	if b, err := h.Store.Claim(ctx, lostReply, "b#1", policy); err != nil || b.Result != lock.Done {
		t.Fatalf("peer's claim after completion = %+v, %v; want done", b, err)
	}
	// A key this Store holds (its attempt ran, and the release's outcome
	// was lost) is held, as anybody's would be: its attempt number must not
	// run twice.
	ran := locktest.UniqueSlot(t, h)
	mustWin(t, h, ran, "a#1")
	if b, err := h.Store.Claim(ctx, ran, "a#1", policy); err != nil || b.Result != lock.Held || b.Attempt != 1 {
		t.Fatalf("claim of a slot this Store holds = %+v, %v; want held, attempt 1", b, err)
	}
	// Another instance of the replica (a restart) does not take it: its
	// lease is not this one's.
	other := locktest.UniqueSlot(t, h)
	mustWin(t, h, other, "a#1")
	etcdlock.LoseReply(h.Store.(*etcdlock.Store), other)
	if b, err := h.Store.Claim(ctx, other, "a#2", policy); err != nil || b.Result != lock.Held {
		t.Fatalf("another instance's claim = %+v, %v; want held", b, err)
	}
}

// The store's clock is the members' (here this machine's): within the
// estimate's uncertainty of time.Now, and a claim before the slot time by
// it is Early however the caller's clock reads.
func TestClockIsTheMembers(t *testing.T) {
	c := etcdtest.Start(t, 1)
	s := newStore(t, c.Endpoints())
	ctx := context.Background()
	for range 3 {
		got, err := s.Time(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Since(got); d < 0 || d > 250*time.Millisecond {
			t.Fatalf("store time %v is %v behind this machine's (want a lower bound within 250ms)", got, d)
		}
	}
	now := time.Now()
	slot := lock.Slot{Task: t.Name(), ID: "x", Time: now.Add(500 * time.Millisecond), Deadline: now.Add(time.Hour)}
	cl, err := s.Claim(ctx, slot, "r", policy)
	if err != nil || cl.Result != lock.Early || cl.Wait <= 0 || cl.Wait > 500*time.Millisecond+250*time.Millisecond {
		t.Fatalf("claim half a second early = %+v, %v; want early", cl, err)
	}
}

func mustWin(t *testing.T, h locktest.Harness, s lock.Slot, replica string) lock.Claim {
	t.Helper()
	c, err := h.Store.Claim(context.Background(), s, replica, policy)
	if err != nil || c.Result != lock.Won {
		t.Fatalf("claim of %s by %s = %+v, %v; want won", s, replica, c, err)
	}
	return c
}

func stateKey(s lock.Slot) string { st, _ := etcdlock.Keys("slotd", s); return st }
