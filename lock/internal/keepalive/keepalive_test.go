package keepalive

import (
	"context"
	"errors"
	"testing"
	"time"
)

// The errors a lease's owner gives: the lease was lost, the lock is gone.
var (
	ErrLeaseLost = errors.New("lost")
	ErrNotHeld   = errors.New("not held")
)

func gone(err error) bool { return errors.Is(err, ErrNotHeld) }

// A kept lease whose acquisition's reply came after its validity is lost
// before keep returns: its context is done with a cause wrapping
// ErrLeaseLost, onLost ran once, no renewal is tried, and stop reports it
// invalid.
func TestKeptLeaseLostOnArrival(t *testing.T) {
	var k Lease
	lost, renewals := 0, 0
	renew := func(context.Context) error { renewals++; return nil }
	k.Keep(context.Background(), time.Second, 100*time.Millisecond, time.Now().Add(-time.Second), holder{renew, nil, func(why error) error {
		lost++
		return errors.Join(ErrLeaseLost, why)
	}})
	if k.ctx.Err() == nil || !errors.Is(context.Cause(k.ctx), ErrLeaseLost) {
		t.Fatalf("context after keep: %v, cause %v; want done with ErrLeaseLost", k.ctx.Err(), context.Cause(k.ctx))
	}
	if _, valid := k.Stop(); valid || !k.Lost() || lost != 1 || renewals != 0 {
		t.Fatalf("valid %v, lost %v, onLost ran %d times, %d renewals", valid, k.Lost(), lost, renewals)
	}
}

// A kept lease renews on its own until stopped, each confirmed renewal
// moving its validity; stop ends it without losing it.
func TestKeptLeaseRenewsUntilStopped(t *testing.T) {
	var k Lease
	renewed := make(chan struct{}, 100)
	k.Keep(context.Background(), 300*time.Millisecond, 30*time.Millisecond, time.Now(), holder{func(context.Context) error { return nil }, func() { renewed <- struct{}{} }, func(why error) error { t.Errorf("lost: %v", why); return why }})
	first := k.ValidUntil()
	for range 3 {
		select {
		case <-renewed:
		case <-time.After(5 * time.Second):
			t.Fatal("no renewal within 5s")
		}
	}
	if !k.ValidUntil().After(first) {
		t.Error("renewals did not move the validity")
	}
	if _, valid := k.Stop(); !valid || k.ctx.Err() != nil {
		t.Fatalf("after stop: valid %v, context %v", valid, k.ctx.Err())
	}
}

// A kept lease whose renewal finds it taken is lost at once, its context
// cancelled with onLost's cause.
func TestKeptLeaseLostWhenTaken(t *testing.T) {
	var k Lease
	k.Keep(context.Background(), 60*time.Millisecond, 6*time.Millisecond, time.Now(), holder{func(context.Context) error { return ErrNotHeld }, nil, func(why error) error { return errors.Join(ErrLeaseLost, why) }})
	select {
	case <-k.ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("not lost within 5s")
	}
	if cause := context.Cause(k.ctx); !errors.Is(cause, ErrLeaseLost) || !errors.Is(cause, ErrNotHeld) {
		t.Fatalf("cause %v, want ErrLeaseLost and ErrNotHeld", cause)
	}
	k.Stop()
}

// renewSoon brings the next renewal forward: with a lease of an hour
// (renewals 20 minutes apart) each call is answered by a renewal at
// once, also one made while a renewal runs, which is followed by
// another.
func TestKeptLeaseRenewSoon(t *testing.T) {
	var k Lease
	renewing := make(chan struct{})
	release := make(chan struct{})
	renewed := make(chan struct{}, 10)
	first := true
	k.Keep(context.Background(), time.Hour, 6*time.Minute, time.Now(), holder{func(context.Context) error {
		if first { // the first renewal waits, to be asked again meanwhile
			first = false
			close(renewing)
			<-release
		}
		return nil
	}, func() { renewed <- struct{}{} }, func(why error) error { t.Errorf("lost: %v", why); return why }})
	defer k.Stop()
	await := func(what string) {
		t.Helper()
		select {
		case <-renewed:
		case <-time.After(5 * time.Second):
			t.Fatalf("no renewal within 5s of %s", what)
		}
	}
	k.RenewSoon()
	<-renewing
	k.RenewSoon() // while the first renewal runs
	close(release)
	await("the first call")
	await("the call made during a renewal")
	k.RenewSoon()
	await("a third call")
	select {
	case <-renewed:
		t.Fatal("a renewal nobody asked for")
	case <-time.After(50 * time.Millisecond):
	}
}

// holder is a Holder of funcs, for the tests; renewed may be nil.
type holder struct {
	renew   func(context.Context) error
	renewed func()
	onLost  func(why error) error
}

func (h holder) Renew(ctx context.Context) error { return h.renew(ctx) }
func (h holder) Gone(err error) bool             { return gone(err) }
func (h holder) OnLost(why error) error          { return h.onLost(why) }

func (h holder) Renewed() {
	if h.renewed != nil {
		h.renewed()
	}
}

// A store whose renewals each take 0.4 of the lease keeps it: the next
// renewal is sent an interval after the last was sent, not after it was
// answered (then each would have been confirmed 0.4 + 0.33 + 0.4 of the
// lease after the one before, past the lease less its margin).
func TestSlowRenewalsKeepTheLease(t *testing.T) {
	const ttl = 3 * time.Second
	var k Lease
	renewed := make(chan struct{}, 100)
	slow := func(ctx context.Context) error {
		select {
		case <-time.After(ttl * 4 / 10): // the store's answer, slow
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	k.Keep(context.Background(), ttl, ttl/10, time.Now(), holder{slow, func() { renewed <- struct{}{} }, func(why error) error { t.Errorf("lost: %v", why); return why }})
	for range 4 {
		select {
		case <-renewed:
		case <-k.ctx.Done():
			t.Fatalf("lease lost after slow renewals: %v", context.Cause(k.ctx))
		}
	}
	if _, valid := k.Stop(); !valid {
		t.Fatal("after four slow renewals the lease is not valid")
	}
}
