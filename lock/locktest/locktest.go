// Package locktest is the conformance suite every lock.Store passes: each
// store package's tests run it (redislock on one server, a Cluster and
// Redlock; memlock; etcdlock; zklock), and so can any store of one's own.
// Run it from a test with a Harness that can look under the store:
//
//	func TestConformance(t *testing.T) { locktest.Run(t, locktest.Harness{Store: s, ...}) }
//
// It checks, for one store: at most one holder per slot; renew, complete
// and release change nothing unless the caller holds the slot; attempts
// never exceed the cap and tokens only grow; every key written has a TTL;
// no claim before the slot time or at or after the deadline; releases and
// reruns wake the slot's watchers; a value slotd did not write is left
// alone; States and ReadState read back what was written; a slot's
// one-time marker (lock.Oncer, on a store that has it) is set by one
// caller only, per event, and expires with its TTL; a holder that stops
// renewing frees its slot to a live peer within LostLeaseBound (lease.go);
// a release with a retry backoff holds every claim back until it ends by
// the store's clock (backoff.go).
//
// RunControls is the suite of the optional operator controls
// (lock.Controls), for a store that offers them: a trigger is idempotent
// by key and its tokens exceed a scheduled slot's of the same second; a
// pause state is seeded, written and read; a task's running record is
// taken, refused (forbid), replaced and expires with its lease; every key
// has a TTL.
//
// RunFleet is the suite of the fleet (lock.Fleet, fleet.go): the first
// start is recorded once; a second instance of a replica id is refused
// until the holder withdraws or its TTL runs out; the live set, on a store
// that keeps one, lists the announced ids and its change notices come.
package locktest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/retry"
)

// Harness is one store under the suite, with the means to look under it.
type Harness struct {
	Store lock.Store
	// Now is the store's clock.
	Now func() time.Time
	// Expire makes d pass for the store's TTLs and leases (not its clock):
	// every key whose TTL is at most d is gone afterwards, the others have
	// d less.
	Expire func(d time.Duration)
	// TTLs lists every key (or node) the store holds with its TTL (<= 0:
	// none). Keys of a slot contain its task name.
	TTLs func() map[string]time.Duration
	// PlantState and PlantAttempts write a raw value, with a TTL, where
	// the store keeps a slot's state and its attempts counter.
	PlantState, PlantAttempts func(slot lock.Slot, value string)
	// Sleep lets d pass for the store, its clock and its leases alike: a
	// store on an injected clock moves it; nil means time.Sleep. Unlike
	// Expire it simulates nothing: the store's holder stays connected
	// (its session, its client lease) while d passes.
	Sleep func(d time.Duration)
	// Policy is the policy the suite claims with; zero means DefaultPolicy.
	// A store whose leases cannot be shortened by Expire may pass a short
	// lease and let Expire wait for real time.
	Policy lock.Policy
	// Split, if not nil, reports an error that contenders racing for one
	// slot may all get and retry (a Redlock's split vote: no quorum).
	Split func(error) bool
	// PlantTriggerKeys, if not nil, writes keys as task's idempotency keys
	// (lock.Controls), oldest first, in one write where the store keeps
	// them, as the triggers that took them would have left them; task has
	// none yet. TriggerKeysCappedPerTask fills a task with it up to one
	// key short of lock.MaxTriggerKeys; nil: it triggers once per key.
	PlantTriggerKeys func(task string, keys []string)
}

// DefaultPolicy is the policy Run claims with unless the Harness names one.
var DefaultPolicy = lock.Policy{Lease: 10 * time.Second, DoneTTL: time.Hour, MaxAttempts: 3}

var testSeq atomic.Int64

// UniqueSlot returns a slot no other test uses, open now by the store's clock.
func UniqueSlot(t *testing.T, h Harness) lock.Slot {
	now := h.Now()
	return lock.Slot{
		Task:     fmt.Sprintf("%s-%d", strings.ReplaceAll(t.Name(), "/", "."), testSeq.Add(1)),
		ID:       now.UTC().Format("20060102150405"),
		Time:     now.Add(-time.Second),
		Deadline: now.Add(time.Hour),
	}
}

// Run runs every conformance test against h, each as a subtest.
func Run(t *testing.T, h Harness) {
	if h.Policy == (lock.Policy{}) {
		h.Policy = DefaultPolicy
	}
	if h.Sleep == nil {
		h.Sleep = time.Sleep
	}
	for _, c := range conformance {
		t.Run(c.name, func(t *testing.T) { c.run(t, h) })
	}
}

var conformance = []struct {
	name string
	run  func(*testing.T, Harness)
}{
	{"OneWinnerAmongConcurrentClaims", testOneWinner},
	{"StaleHolderChangesNothing", testStaleHolder},
	{"AttemptsCapped", testAttemptsCapped},
	{"EveryKeyHasTTL", testEveryKeyHasTTL},
	{"EarlyClaimRefused", testEarly},
	{"LateClaimRefused", testLate},
	{"CompleteIsFinalAndIdempotent", testComplete},
	{"ReleaseWakesWatchers", testReleaseWakes},
	{"ReleaseNoticeNamesTheSlot", testReleaseNotice},
	{"PeekReadsStatusAndLease", testPeek},
	{"TalliesReadBack", testTally},
	{"RenewExtendsOnlyOwnLease", testRenew},
	{"ForeignValueLeftAlone", testForeign},
	{"StateReadsBack", testState},
	{"RerunRestartsTheCapNotTheTokens", testRerun},
	{"StatesReadsManySlots", testStates},
	{"OnceMarksOnlyOnce", testOnce},
	{"LostLeaseClaimableByPeer", testLostLease},
	{"ReleaseWithBackoffHoldsNextClaim", testBackoff},
}

func mustClaim(t *testing.T, h Harness, slot lock.Slot, replica string, want lock.Result) lock.Claim {
	t.Helper()
	c, err := h.Store.Claim(context.Background(), slot, replica, h.Policy)
	if err != nil {
		t.Fatalf("claim by %s: %v", replica, err)
	}
	if c.Result != want {
		t.Fatalf("claim by %s = %v, want %v (%+v)", replica, c.Result, want, c)
	}
	return c
}

func testOneWinner(t *testing.T, h Harness) {
	slot := UniqueSlot(t, h)
	const n = 24
	// A contender that finds the slot held, or (on a Redlock store, whose
	// nodes may split their votes) gets ErrNoQuorum, claims again after a
	// random delay until somebody has won: where the scheduler would wait
	// for the release, or the lease. Every Won counts.
	var someoneWon atomic.Bool
	claim := func(replica string) (lock.Claim, error) {
		for {
			c, err := h.Store.Claim(context.Background(), slot, replica, h.Policy)
			switch {
			case err == nil && c.Result == lock.Won:
				someoneWon.Store(true)
				return c, nil
			case err != nil && h.Split != nil && h.Split(err):
			case err != nil, someoneWon.Load():
				return c, err
			}
			time.Sleep(retry.Backoff{Min: time.Millisecond, Max: 50 * time.Millisecond}.Delay(3))
		}
	}
	var wg sync.WaitGroup
	results := make([]lock.Claim, n)
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i], errs[i] = claim(fmt.Sprintf("r%d", i))
		}()
	}
	close(start)
	wg.Wait()
	winners := 0
	for i, c := range results {
		if errs[i] != nil {
			t.Fatalf("claim %d: %v", i, errs[i])
		}
		switch c.Result {
		case lock.Won:
			winners++
			if c.Attempt != 1 {
				t.Errorf("winner attempt = %d, want 1", c.Attempt)
			}
		case lock.Held:
			if c.Wait <= 0 || c.Wait > h.Policy.Lease {
				t.Errorf("held: wait %v outside (0, lease]", c.Wait)
			}
		default:
			t.Errorf("claim %d = %v, want won or held", i, c.Result)
		}
	}
	if winners != 1 {
		t.Fatalf("%d winners among %d contenders, want exactly 1", winners, n)
	}
}

func testStaleHolder(t *testing.T, h Harness) {
	ctx := context.Background()
	slot := UniqueSlot(t, h)
	a := mustClaim(t, h, slot, "a", lock.Won)
	h.Expire(h.Policy.Lease + time.Millisecond) // a paused past its lease
	b := mustClaim(t, h, slot, "b", lock.Won)
	if b.Attempt != a.Attempt+1 {
		t.Fatalf("b attempt = %d, want %d", b.Attempt, a.Attempt+1)
	}
	if lock.Token(slot.Time, b.Attempt) <= lock.Token(slot.Time, a.Attempt) {
		t.Fatal("b's fencing token is not above a's")
	}
	stale := lock.Owner{ID: "a", Attempt: a.Attempt}
	for name, op := range map[string]func() error{
		"renew":    func() error { return h.Store.Renew(ctx, slot, stale, h.Policy.Lease) },
		"complete": func() error { return h.Store.Complete(ctx, slot, stale, h.Policy.DoneTTL) },
		"release":  func() error { return h.Store.Release(ctx, slot, stale) },
	} {
		if err := op(); !errors.Is(err, lock.ErrNotHeld) {
			t.Errorf("stale %s: err = %v, want ErrNotHeld", name, err)
		}
	}
	// Same replica name, earlier attempt: still stale.
	if err := h.Store.Release(ctx, slot, lock.Owner{ID: "b", Attempt: a.Attempt}); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("release with b's name and a's attempt: err = %v, want ErrNotHeld", err)
	}
	st, err := lock.ReadState(ctx, h.Store, slot)
	if err != nil {
		t.Fatal(err)
	}
	if st.Status != "running" || st.Holder != "b" || st.Attempt != b.Attempt {
		t.Fatalf("state after stale writes = %+v, want running by b attempt %d", st, b.Attempt)
	}
}

func testAttemptsCapped(t *testing.T, h Harness) {
	ctx := context.Background()
	slot := UniqueSlot(t, h)
	var tokens []int64
	for i := 1; i <= h.Policy.MaxAttempts; i++ {
		c := mustClaim(t, h, slot, "r", lock.Won)
		if c.Attempt != i {
			t.Fatalf("attempt = %d, want %d", c.Attempt, i)
		}
		tokens = append(tokens, lock.Token(slot.Time, c.Attempt))
		if i%2 == 0 {
			h.Expire(h.Policy.Lease) // a crash: the lease runs out
		} else if err := h.Store.Release(ctx, slot, lock.Owner{ID: "r", Attempt: i}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("tokens not increasing: %v", tokens)
		}
	}
	c := mustClaim(t, h, slot, "other", lock.Exhausted)
	if c.Attempt != h.Policy.MaxAttempts {
		t.Fatalf("exhausted after %d attempts, want %d", c.Attempt, h.Policy.MaxAttempts)
	}
	st, _ := lock.ReadState(ctx, h.Store, slot)
	if st.Attempts != h.Policy.MaxAttempts || st.Status != "free" {
		t.Fatalf("state = %+v, want free with %d attempts", st, h.Policy.MaxAttempts)
	}
}

func testEveryKeyHasTTL(t *testing.T, h Harness) {
	ctx := context.Background()
	check := func(when string) {
		t.Helper()
		ttls := h.TTLs()
		if len(ttls) == 0 {
			t.Fatalf("%s: no keys at all", when)
		}
		for k, ttl := range ttls {
			if ttl <= 0 {
				t.Errorf("%s: key %q has no TTL (%v)", when, k, ttl)
			}
		}
	}
	slot := UniqueSlot(t, h)
	c := mustClaim(t, h, slot, "r", lock.Won)
	check("after claim")
	own := lock.Owner{ID: "r", Attempt: c.Attempt}
	if err := h.Store.Renew(ctx, slot, own, h.Policy.Lease); err != nil {
		t.Fatal(err)
	}
	check("after renew")
	if err := h.Store.Release(ctx, slot, own); err != nil {
		t.Fatal(err)
	}
	check("after release")
	c = mustClaim(t, h, slot, "r", lock.Won)
	if err := h.Store.Complete(ctx, slot, lock.Owner{ID: "r", Attempt: c.Attempt}, h.Policy.DoneTTL); err != nil {
		t.Fatal(err)
	}
	check("after complete")
}

func testEarly(t *testing.T, h Harness) {
	slot := UniqueSlot(t, h)
	now := h.Now()
	slot.Time = now.Add(time.Hour)
	slot.Deadline = now.Add(2 * time.Hour)
	c := mustClaim(t, h, slot, "r", lock.Early)
	if c.Wait < 59*time.Minute || c.Wait > time.Hour {
		t.Fatalf("early wait = %v, want about 1h", c.Wait)
	}
	for k := range h.TTLs() {
		if strings.Contains(k, slot.Task) {
			t.Fatalf("early claim wrote %q", k)
		}
	}
	// Within the tolerance the claim goes through.
	p := h.Policy
	p.Tolerance = time.Hour + time.Minute
	if c, err := h.Store.Claim(context.Background(), slot, "r", p); err != nil || c.Result != lock.Won {
		t.Fatalf("claim within tolerance = %v, %v; want won", c.Result, err)
	}
}

func testLate(t *testing.T, h Harness) {
	slot := UniqueSlot(t, h)
	now := h.Now()
	slot.Time = now.Add(-2 * time.Hour)
	slot.Deadline = now.Add(-time.Hour)
	mustClaim(t, h, slot, "r", lock.Late)
}

func testComplete(t *testing.T, h Harness) {
	ctx := context.Background()
	slot := UniqueSlot(t, h)
	c := mustClaim(t, h, slot, "winner", lock.Won)
	own := lock.Owner{ID: "winner", Attempt: c.Attempt}
	if err := h.Store.Complete(ctx, slot, own, h.Policy.DoneTTL); err != nil {
		t.Fatal(err)
	}
	// A retry after a lost reply succeeds again and changes nothing.
	if err := h.Store.Complete(ctx, slot, own, h.Policy.DoneTTL); err != nil {
		t.Fatalf("second complete: %v", err)
	}
	// Release and renew of a done slot change nothing.
	if err := h.Store.Release(ctx, slot, own); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("release after complete: %v, want ErrNotHeld", err)
	}
	if err := h.Store.Renew(ctx, slot, own, h.Policy.Lease); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("renew after complete: %v, want ErrNotHeld", err)
	}
	h.Expire(h.Policy.Lease * 2) // far past the lease: the done marker stays
	d := mustClaim(t, h, slot, "other", lock.Done)
	if d.Holder != "winner" || d.Attempt != c.Attempt {
		t.Fatalf("done claim = %+v, want holder winner attempt %d", d, c.Attempt)
	}
	for k, ttl := range h.TTLs() {
		if strings.Contains(k, slot.Task) && ttl < h.Policy.DoneTTL-h.Policy.Lease*3 {
			t.Errorf("key %q TTL %v, want about done TTL %v", k, ttl, h.Policy.DoneTTL)
		}
	}
}

func testReleaseWakes(t *testing.T, h Harness) {
	ctx := context.Background()
	slot := UniqueSlot(t, h)
	other := UniqueSlot(t, h)
	w := h.Store.Watch(slot)
	defer w.Stop()
	wo := h.Store.Watch(other)
	defer wo.Stop()
	c := mustClaim(t, h, slot, "a", lock.Won)
	mustClaim(t, h, slot, "b", lock.Held)
	if err := h.Store.Release(ctx, slot, lock.Owner{ID: "a", Attempt: c.Attempt}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.C():
	case <-time.After(5 * time.Second):
		t.Fatal("watcher not woken within 5s of the release")
	}
	select {
	case <-wo.C():
		t.Fatal("watcher of another slot was woken")
	default:
	}
	mustClaim(t, h, slot, "b", lock.Won)
}

func testRenew(t *testing.T, h Harness) {
	ctx := context.Background()
	slot := UniqueSlot(t, h)
	c := mustClaim(t, h, slot, "a", lock.Won)
	own := lock.Owner{ID: "a", Attempt: c.Attempt}
	h.Expire(h.Policy.Lease - time.Second)
	if err := h.Store.Renew(ctx, slot, own, h.Policy.Lease); err != nil {
		t.Fatal(err)
	}
	h.Expire(h.Policy.Lease - time.Second) // would have expired without the renewal
	st, err := lock.ReadState(ctx, h.Store, slot)
	if err != nil {
		t.Fatal(err)
	}
	if st.Status != "running" || st.Holder != "a" {
		t.Fatalf("after renew: %+v, want running by a", st)
	}
	if err := h.Store.Renew(ctx, slot, lock.Owner{ID: "b", Attempt: c.Attempt}, h.Policy.Lease); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("renew by non-holder: %v, want ErrNotHeld", err)
	}
}

func testForeign(t *testing.T, h Harness) {
	ctx := context.Background()
	slot := UniqueSlot(t, h)
	h.PlantState(slot, "somebody else's value")
	if _, err := h.Store.Claim(ctx, slot, "r", h.Policy); !errors.Is(err, lock.ErrForeign) {
		t.Fatalf("claim over foreign state: %v, want ErrForeign", err)
	}
	if err := h.Store.Release(ctx, slot, lock.Owner{ID: "r", Attempt: 1}); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("release of foreign state: %v, want ErrNotHeld", err)
	}
	slot2 := UniqueSlot(t, h)
	h.PlantAttempts(slot2, "not a number")
	if _, err := h.Store.Claim(ctx, slot2, "r", h.Policy); !errors.Is(err, lock.ErrForeign) {
		t.Fatalf("claim over foreign counter: %v, want ErrForeign", err)
	}
	if st, _ := lock.ReadState(ctx, h.Store, slot2); st.Status != "free" {
		t.Fatalf("foreign counter slot state = %+v, want untouched free", st)
	}
}
