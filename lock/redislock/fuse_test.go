package redislock

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/internal/schema"
	"github.com/slotd/slotd/scheduler/history"
)

// fusedBurst makes n concurrent calls of op (slot i is batchSlot(100+i))
// queue behind the gate's held flights, lets them go, and returns each
// call's error and the EVALSHA commands they took.
func fusedBurst(t *testing.T, r *Store, g *gate, now time.Time, n int, op func(i int, slot lock.Slot) error) ([]error, int) {
	t.Helper()
	p := lock.Policy{Lease: time.Minute, DoneTTL: time.Hour, MaxAttempts: 3}
	g.armed.Store(true)
	held := fillFlights(t, r, g, now, p)
	before := g.count("evalsha")
	errs := make([]error, n)
	done := make(chan struct{}, n)
	for i := range n {
		go func() {
			errs[i] = op(i, batchSlot(100+i, now))
			done <- struct{}{}
		}()
	}
	awaitQueue(t, r, n)
	close(g.open)
	for range n {
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("fused calls did not return")
		}
	}
	held.Wait()
	return errs, g.count("evalsha") - before - defaultMaxFlights // less the held lone claims
}

// N concurrent claims, renewals, completions or releases of distinct slots
// leave as ceil(N/256) EVALSHA commands, one per round trip, and each
// caller gets its own answer: the peer's slots read held, a slot holding a
// value slotd did not write answers ErrForeign (claim) or ErrNotHeld (the
// others), a slot whose key is a hash fails alone, and the rest succeed.
func TestFusedCallsAnswerEachSlot(t *testing.T) {
	const n, foreign, hash = 600, 7, 301
	p := lock.Policy{Lease: time.Minute, DoneTTL: time.Hour, MaxAttempts: 3}
	mine := func(i int) bool { return i%2 == 1 } // the even slots are the peer's
	type op struct {
		name string
		call func(r *Store, i int, slot lock.Slot) error
		// after checks slot i's state after the call succeeded.
		after func(st lock.State) bool
	}
	owner := lock.Owner{ID: "r", Attempt: 1}
	ops := []op{
		{"claim", func(r *Store, i int, slot lock.Slot) error {
			c, err := r.Claim(context.Background(), slot, "r", p)
			switch {
			case err != nil:
				return err
			case mine(i) && (c.Result != lock.Won || c.Attempt != 1):
				return errors.New("want won attempt 1, got " + c.Result.String())
			case !mine(i) && (c.Result != lock.Held || c.Holder != "peer"):
				return errors.New("want held by peer, got " + c.Result.String() + " by " + c.Holder)
			}
			return nil
		}, func(st lock.State) bool { return st.Status == "running" }},
		{"renew", func(r *Store, _ int, slot lock.Slot) error {
			return r.Renew(context.Background(), slot, owner, 2*p.Lease)
		}, func(st lock.State) bool { return st.Status == "running" && st.TTL > p.Lease }},
		{"complete", func(r *Store, _ int, slot lock.Slot) error {
			return r.Complete(context.Background(), slot, owner, p.DoneTTL)
		}, func(st lock.State) bool { return st.Status == "done" && st.Holder == "r" }},
		{"release", func(r *Store, _ int, slot lock.Slot) error {
			return r.Release(context.Background(), slot, owner)
		}, func(st lock.State) bool { return st.Status == "free" }},
	}
	for _, o := range ops {
		t.Run(o.name, func(t *testing.T) {
			g := newGate(defaultMaxFlights)
			r, rdb := gatedStore(t, g)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			now := time.Now()
			reqs := make([]lock.ClaimRequest, 0, n)
			for i := range n {
				if i == foreign || i == hash {
					continue
				}
				if o.name != "claim" || !mine(i) {
					replica := "r"
					if !mine(i) {
						replica = "peer"
					}
					reqs = append(reqs, lock.ClaimRequest{Slot: batchSlot(100+i, now), Owner: replica, Policy: p})
				}
			}
			g.armed.Store(false) // the setup is neither held nor counted
			for _, rep := range claimAll(ctx, r, reqs) {
				if rep.Err != nil || rep.Result != lock.Won {
					t.Fatalf("setup claim: %v %v", rep.Result, rep.Err)
				}
			}
			state, _ := Keys("slotd", batchSlot(100+foreign, now))
			if err := rdb.Set(ctx, state, "not ours", time.Hour).Err(); err != nil {
				t.Fatal(err)
			}
			state, _ = Keys("slotd", batchSlot(100+hash, now))
			if err := rdb.HSet(ctx, state, "f", "v").Err(); err != nil {
				t.Fatal(err)
			}

			errs, evalsha := fusedBurst(t, r, g, now, n, func(i int, slot lock.Slot) error { return o.call(r, i, slot) })
			if want := (n + defaultMaxBatch - 1) / defaultMaxBatch; evalsha != want {
				t.Errorf("%d %s calls took %d EVALSHA, want %d", n, o.name, evalsha, want)
			}
			for i, err := range errs {
				switch {
				case i == foreign && o.name == "claim":
					if !errors.Is(err, lock.ErrForeign) {
						t.Errorf("claim of a foreign slot: %v, want ErrForeign", err)
					}
				case i == foreign || (o.name != "claim" && !mine(i)):
					if !errors.Is(err, lock.ErrNotHeld) {
						t.Errorf("%s %d of a slot the caller does not hold: %v, want ErrNotHeld", o.name, i, err)
					}
				case i == hash:
					if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
						t.Errorf("%s of a slot whose key is a hash: %v, want WRONGTYPE", o.name, err)
					}
				case err != nil:
					t.Errorf("%s %d: %v", o.name, i, err)
				}
			}
			var mineSlots []lock.Slot
			for i := range n {
				if mine(i) && i != foreign && i != hash {
					mineSlots = append(mineSlots, batchSlot(100+i, now))
				}
			}
			sts, err := r.States(ctx, mineSlots)
			if err != nil {
				t.Fatal(err)
			}
			for i, st := range sts {
				if !o.after(st) {
					t.Fatalf("%s: slot %s after the call: %+v", o.name, mineSlots[i], st)
				}
			}
		})
	}
}

// On a Redis Cluster the slots' keys live on different shards, which one
// script call cannot span: nothing is fused, each claim is its own EVALSHA
// (a fused one would fail CROSSSLOT), and each caller gets its own answer.
func TestClusterClaimsAreNotFused(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 3)
	rdb := c.Client()
	g := newGate(0)
	rdb.AddHook(g)
	r := New(rdb, "slotd")
	t.Cleanup(func() { r.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	now := time.Now()
	p := lock.Policy{Lease: time.Minute, DoneTTL: time.Hour, MaxAttempts: 3}
	const n = 300
	reqs := make([]lock.ClaimRequest, n)
	for i := range reqs {
		reqs[i] = lock.ClaimRequest{Slot: batchSlot(i, now), Owner: "r", Policy: p}
	}
	// Warm the scripts on every master, so that the count sees no NOSCRIPT.
	if err := rdb.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		for s := range fusable {
			if err := s.Load(ctx, node).Err(); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	g.armed.Store(true)
	for round, want := range []lock.Result{lock.Won, lock.Held} {
		before := g.count("evalsha")
		for i, rep := range claimAll(ctx, r, reqs) {
			if rep.Err != nil || rep.Result != want || rep.Attempt != 1 {
				t.Fatalf("round %d claim %d: %v attempt %d, %v; want %v attempt 1", round, i, rep.Result, rep.Attempt, rep.Err, want)
			}
		}
		if got := g.count("evalsha") - before; got != n {
			t.Errorf("round %d: %d claims took %d EVALSHA, want one each", round, n, got)
		}
	}
	errs := make(chan error, n)
	for i := range n {
		go func() { errs <- r.Release(ctx, reqs[i].Slot, lock.Owner{ID: "r", Attempt: 1}) }()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatalf("release on the cluster: %v", err)
		}
	}
}

// A call whose keys or arguments do not fit its script's arity would shift
// its neighbours' arguments in a fused call: it is answered with an error
// naming the counts and not sent, and the calls beside it are unharmed.
func TestFusedCallOfWrongArityFailsAlone(t *testing.T) {
	g := newGate(defaultMaxFlights)
	r, _ := gatedStore(t, g)
	now := time.Now()
	ctx := context.Background()
	owner := lock.Owner{ID: "r", Attempt: 1}
	errs, evalsha := fusedBurst(t, r, g, now, 3, func(i int, slot lock.Slot) error {
		if i == 1 {
			return r.batch.run(ctx, releaseScript, []string{"k1", "k2"}, schema.Run(owner)).Err()
		}
		return r.Release(ctx, slot, owner)
	})
	if errs[1] == nil || !strings.Contains(errs[1].Error(), "2 keys and 1 arguments, want 1 and 3") {
		t.Errorf("call of the wrong arity: %v, want an error naming the counts", errs[1])
	}
	for _, i := range []int{0, 2} {
		if !errors.Is(errs[i], lock.ErrNotHeld) {
			t.Errorf("release %d beside it: %v, want ErrNotHeld (the slot is free)", i, errs[i])
		}
	}
	if evalsha != 1 {
		t.Errorf("%d EVALSHA for the two well-formed releases, want 1", evalsha)
	}
}

// One fused call of recorded completions answers each slot its own way,
// in order: a state key of the wrong type is that slot's error, a stream
// key of another type leaves that slot done and answered 2, a slot the
// caller does not hold is 0, and the slots after each are completed and
// recorded (complete.lua's protected runs).
func TestFusedRecordedCompletionAnswersEachSlot(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	s, h := Open(rdb, Config{Prefix: "slotd", HistoryTTL: time.Hour})
	t.Cleanup(func() { h.Close(); s.Close() })
	ctx := context.Background()
	p := lock.Policy{Lease: time.Minute, DoneTTL: time.Hour, MaxAttempts: 3}
	now := time.Now()
	owner := lock.Owner{ID: "r", Attempt: 1}
	const wrongState, wrongStream, notHeld = 0, 2, 4
	var keys []string
	var args []any
	for i := range 6 {
		slot := lock.Slot{Task: "fused" + string(rune('a'+i)), ID: "1", Time: now.Add(-time.Second), Deadline: now.Add(time.Hour)}
		if i != notHeld {
			if c, err := s.Claim(ctx, slot, "r", p); err != nil || c.Result != lock.Won {
				t.Fatalf("claim %s: %v %v", slot, c.Result, err)
			}
		}
		state, _ := Keys("slotd", slot)
		switch i {
		case wrongState:
			rdb.Del(ctx, state)
			rdb.HSet(ctx, state, "f", "v")
		case wrongStream:
			rdb.Set(ctx, HistoryKey("slotd", slot.Task), "x", time.Hour)
		}
		e := history.Entry{Slot: slot.ID, SlotTime: slot.Time, Attempt: 1, Replica: "r", Outcome: "success", Started: now}
		rec := &record{stream: HistoryKey("slotd", slot.Task), maxLen: history.MaxLen, ttl: time.Hour, values: entryValues(e)}
		k, a := s.completeArgs(slot, owner, p.DoneTTL, rec)
		keys, args = append(keys, k...), append(args, a...)
	}
	replies := splitReply(completeRecordScript.Run(ctx, rdb, keys, args...), 6)
	for i, r := range replies {
		n, err := r.Int()
		stream := HistoryKey("slotd", "fused"+string(rune('a'+i)))
		switch i {
		case wrongState:
			if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
				t.Errorf("slot %d, state key a hash: %d, %v; want WRONGTYPE", i, n, err)
			}
		case wrongStream:
			if err != nil || n != 2 {
				t.Errorf("slot %d, stream key a string: %d, %v; want 2", i, n, err)
			}
		case notHeld:
			if err != nil || n != 0 {
				t.Errorf("slot %d, not held: %d, %v; want 0", i, n, err)
			}
		default:
			if err != nil || n != 1 {
				t.Errorf("slot %d: %d, %v; want 1", i, n, err)
			}
			if l := rdb.XLen(ctx, stream).Val(); l != 1 {
				t.Errorf("slot %d: %d entries in its stream, want 1", i, l)
			}
		}
		if i != wrongState && i != notHeld {
			state, _ := Keys("slotd", lock.Slot{Task: "fused" + string(rune('a'+i)), ID: "1"})
			if v := rdb.Get(ctx, state).Val(); !strings.HasPrefix(v, "done:r:1:") {
				t.Errorf("slot %d: state %q, want done by r", i, v)
			}
		}
	}
}
