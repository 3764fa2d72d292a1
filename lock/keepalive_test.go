package lock

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A kept lease whose acquisition's reply came after its validity is lost
// before keep returns: its context is done with a cause wrapping
// ErrLeaseLost, onLost ran once, no renewal is tried, and stop reports it
// invalid.
func TestKeptLeaseLostOnArrival(t *testing.T) {
	var k keptLease
	lost, renewals := 0, 0
	renew := func(context.Context) error { renewals++; return nil }
	k.keep(context.Background(), time.Second, time.Now().Add(-time.Second), renew, nil, func(why error) error {
		lost++
		return errors.Join(ErrLeaseLost, why)
	})
	if k.ctx.Err() == nil || !errors.Is(context.Cause(k.ctx), ErrLeaseLost) {
		t.Fatalf("context after keep: %v, cause %v; want done with ErrLeaseLost", k.ctx.Err(), context.Cause(k.ctx))
	}
	if _, valid := k.stop(); valid || !k.isLost() || lost != 1 || renewals != 0 {
		t.Fatalf("valid %v, lost %v, onLost ran %d times, %d renewals", valid, k.isLost(), lost, renewals)
	}
}

// A kept lease renews on its own until stopped, each confirmed renewal
// moving its validity; stop ends it without losing it.
func TestKeptLeaseRenewsUntilStopped(t *testing.T) {
	var k keptLease
	renewed := make(chan struct{}, 100)
	k.keep(context.Background(), 300*time.Millisecond, time.Now(), func(context.Context) error { return nil },
		func() { renewed <- struct{}{} }, func(why error) error { t.Errorf("lost: %v", why); return why })
	first := k.validUntil()
	for range 3 {
		select {
		case <-renewed:
		case <-time.After(5 * time.Second):
			t.Fatal("no renewal within 5s")
		}
	}
	if !k.validUntil().After(first) {
		t.Error("renewals did not move the validity")
	}
	if _, valid := k.stop(); !valid || k.ctx.Err() != nil {
		t.Fatalf("after stop: valid %v, context %v", valid, k.ctx.Err())
	}
}

// A kept lease whose renewal finds it taken is lost at once, its context
// cancelled with onLost's cause.
func TestKeptLeaseLostWhenTaken(t *testing.T) {
	var k keptLease
	k.keep(context.Background(), 60*time.Millisecond, time.Now(), func(context.Context) error { return ErrNotHeld },
		nil, func(why error) error { return errors.Join(ErrLeaseLost, why) })
	select {
	case <-k.ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("not lost within 5s")
	}
	if cause := context.Cause(k.ctx); !errors.Is(cause, ErrLeaseLost) || !errors.Is(cause, ErrNotHeld) {
		t.Fatalf("cause %v, want ErrLeaseLost and ErrNotHeld", cause)
	}
	k.stop()
}

// renewSoon brings the next renewal forward: with a lease of an hour
// (renewals 20 minutes apart) each call is answered by a renewal at
// once, also one made while a renewal runs, which is followed by
// another.
func TestKeptLeaseRenewSoon(t *testing.T) {
	var k keptLease
	renewing := make(chan struct{})
	release := make(chan struct{})
	renewed := make(chan struct{}, 10)
	first := true
	k.keep(context.Background(), time.Hour, time.Now(), func(context.Context) error {
		if first { // the first renewal waits, to be asked again meanwhile
			first = false
			close(renewing)
			<-release
		}
		return nil
	}, func() { renewed <- struct{}{} }, func(why error) error { t.Errorf("lost: %v", why); return why })
	defer k.stop()
	await := func(what string) {
		t.Helper()
		select {
		case <-renewed:
		case <-time.After(5 * time.Second):
			t.Fatalf("no renewal within 5s of %s", what)
		}
	}
	k.renewSoon()
	<-renewing
	k.renewSoon() // while the first renewal runs
	close(release)
	await("the first call")
	await("the call made during a renewal")
	k.renewSoon()
	await("a third call")
	select {
	case <-renewed:
		t.Fatal("a renewal nobody asked for")
	case <-time.After(50 * time.Millisecond):
	}
}
