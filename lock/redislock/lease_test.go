package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/memlock"
	"github.com/slotd/slotd/lock/redislock"
)

// faulty wraps a real store and fails renewals, or the next completions,
// on demand: the thin fault injector the lease tests need.
type faulty struct {
	lock.Store
	failRenew     atomic.Bool
	renews        atomic.Int64
	failCompletes atomic.Int64 // completions still to fail; negative: all
	completes     atomic.Int64
}

var errInjected = errors.New("injected: connection reset")

func (f *faulty) Renew(ctx context.Context, s lock.Slot, o lock.Owner, d time.Duration) error {
	f.renews.Add(1)
	if f.failRenew.Load() {
		return errInjected
	}
	return f.Store.Renew(ctx, s, o, d)
}

func (f *faulty) Complete(ctx context.Context, s lock.Slot, o lock.Owner, d time.Duration) error {
	f.completes.Add(1)
	if f.failCompletes.Load() < 0 || f.failCompletes.Add(-1) >= 0 {
		return errInjected
	}
	return f.Store.Complete(ctx, s, o, d)
}

func redisStore(t *testing.T) (*redislock.Store, *redistest.Server) {
	srv := redistest.Start(t)
	r := redislock.New(srv.Client(), "slotd")
	t.Cleanup(func() { r.Close() })
	return r, srv
}

func openSlot(t *testing.T, s lock.Store) lock.Slot {
	now, err := s.Time(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return lock.Slot{Task: t.Name(), ID: "1", Time: now.Add(-time.Second), Deadline: now.Add(time.Hour)}
}

func claimWon(t *testing.T, s lock.Store, slot lock.Slot, replica string, p lock.Policy) lock.Claim {
	t.Helper()
	c, err := s.Claim(context.Background(), slot, replica, p)
	if err != nil || c.Result != lock.Won {
		t.Fatalf("claim: %v, %v", c.Result, err)
	}
	return c
}

func TestLeaseRenewsBeyondItsTTL(t *testing.T) {
	r, _ := redisStore(t)
	p := lock.Policy{Lease: 300 * time.Millisecond, DoneTTL: time.Minute, MaxAttempts: 3}
	slot := openSlot(t, r)
	c := claimWon(t, r, slot, "a", p)
	renewed := make(chan struct{}, 16)
	l := lock.Hold(context.Background(), r, slot, "a", c, p.Lease, lock.LeaseHooks{
		Renewed: func() { renewed <- struct{}{} },
	})
	// Six renewals span twice the lease: without them the key would be gone.
	for range 6 {
		select {
		case <-renewed:
		case <-l.Context().Done():
			t.Fatalf("lease lost while Redis was healthy: %v", context.Cause(l.Context()))
		case <-time.After(10 * time.Second):
			t.Fatal("no renewal within 10s")
		}
	}
	if got, _ := r.Claim(context.Background(), slot, "b", p); got.Result != lock.Held || got.Holder != "a" {
		t.Fatalf("peer claim during renewed lease = %+v, want held by a", got)
	}
	if err := l.Complete(context.Background(), p.DoneTTL); err != nil {
		t.Fatal(err)
	}
	if st, _ := lock.ReadState(context.Background(), r, slot); st.Status != "done" {
		t.Fatalf("state = %+v, want done", st)
	}
	if l.Context().Err() == nil {
		t.Fatal("lease context still live after Complete")
	}
}

// A renewal that keeps failing must cancel the task before the lease could
// have run out, so that the task stops before any peer can take the slot.
func TestLeaseLostBeforeExpiryWhenRenewalsFail(t *testing.T) {
	r, _ := redisStore(t)
	f := &faulty{Store: r}
	p := lock.Policy{Lease: 600 * time.Millisecond, DoneTTL: time.Minute, MaxAttempts: 3}
	slot := openSlot(t, r)
	c := claimWon(t, f, slot, "a", p)
	f.failRenew.Store(true)
	var lostWhy atomic.Value
	l := lock.Hold(context.Background(), f, slot, "a", c, p.Lease, lock.LeaseHooks{
		Lost: func(err error) { lostWhy.Store(err) },
	})
	select {
	case <-l.Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("lease not lost within 10s of failing renewals")
	}
	lostAt := time.Since(c.Sent)
	if !errors.Is(context.Cause(l.Context()), lock.ErrLeaseLost) {
		t.Fatalf("cause = %v, want ErrLeaseLost", context.Cause(l.Context()))
	}
	if lostAt >= p.Lease {
		t.Fatalf("lease declared lost %v after the claim was sent, not before the %v lease could run out", lostAt, p.Lease)
	}
	if f.renews.Load() < 2 {
		t.Fatalf("only %d renewals tried before giving up", f.renews.Load())
	}
	if lostWhy.Load() == nil {
		t.Fatal("Lost hook not called")
	}
	if !l.Lost() {
		t.Fatal("Lost() = false")
	}
	// The key still exists (Redis was fine); the holder must not complete.
	if err := l.Complete(context.Background(), p.DoneTTL); !errors.Is(err, lock.ErrLeaseLost) {
		t.Fatalf("complete after loss: %v, want ErrLeaseLost", err)
	}
	if st, _ := lock.ReadState(context.Background(), r, slot); st.Status == "done" {
		t.Fatal("slot marked done by a holder that lost its lease")
	}
}

// Redis restarted empty mid-task: the next renewal finds the key gone, the
// lease is lost at once, and the key is not recreated.
func TestLeaseLostWhenKeyVanishes(t *testing.T) {
	r, srv := redisStore(t)
	p := lock.Policy{Lease: 3 * time.Second, DoneTTL: time.Minute, MaxAttempts: 3}
	slot := openSlot(t, r)
	c := claimWon(t, r, slot, "a", p)
	l := lock.Hold(context.Background(), r, slot, "a", c, p.Lease, lock.LeaseHooks{})
	srv.FlushAll()
	select {
	case <-l.Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("lease not lost within 10s of its key vanishing")
	}
	if !errors.Is(context.Cause(l.Context()), lock.ErrNotHeld) {
		t.Fatalf("cause = %v, want it to wrap ErrNotHeld", context.Cause(l.Context()))
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatalf("release after loss: %v", err)
	}
	if st, _ := lock.ReadState(context.Background(), r, slot); st.Status != "free" {
		t.Fatalf("state = %+v, want free: a lost holder recreated its key", st)
	}
}

// A claim whose reply arrives after its validity is not a win.
func TestLeaseFromLateReplyIsLost(t *testing.T) {
	m := memlock.New(nil)
	p := lock.Policy{Lease: time.Second, DoneTTL: time.Minute, MaxAttempts: 3}
	slot := openSlot(t, m)
	c := claimWon(t, m, slot, "a", p)
	c.Sent = c.Sent.Add(-p.Lease) // as if the reply took a whole lease to arrive
	l := lock.Hold(context.Background(), m, slot, "a", c, p.Lease, lock.LeaseHooks{})
	select {
	case <-l.Context().Done():
	case <-time.After(5 * time.Second):
		t.Fatal("late claim reply not treated as lost")
	}
	if err := l.Complete(context.Background(), p.DoneTTL); !errors.Is(err, lock.ErrLeaseLost) {
		t.Fatalf("complete: %v, want ErrLeaseLost", err)
	}
}

func TestLeaseReleaseHandsOver(t *testing.T) {
	r, _ := redisStore(t)
	if err := r.Subscribe(context.Background()); err != nil {
		t.Fatal(err)
	}
	p := lock.Policy{Lease: 10 * time.Second, DoneTTL: time.Minute, MaxAttempts: 3}
	slot := openSlot(t, r)
	w := r.Watch(slot)
	defer w.Stop()
	c := claimWon(t, r, slot, "a", p)
	l := lock.Hold(context.Background(), r, slot, "a", c, p.Lease, lock.LeaseHooks{})
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.C():
	case <-time.After(5 * time.Second):
		t.Fatal("no release notification")
	}
	b := claimWon(t, r, slot, "b", p)
	if lock.Token(slot.Time, b.Attempt) <= l.Token() {
		t.Fatalf("token %d not above the released attempt's %d", lock.Token(slot.Time, b.Attempt), l.Token())
	}
}

func ExampleToken() {
	slot := time.Date(2024, 1, 15, 14, 0, 0, 0, time.UTC)
	next := slot.Add(time.Hour)
	fmt.Println(lock.Token(slot, 1), lock.Token(slot, 2), lock.Token(next, 1))
	// Output: 1705327200001 1705327200002 1705330800001
}
