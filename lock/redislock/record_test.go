package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/redislock"
)

// opened is Open on a fresh server: the store and history the daemon runs.
func opened(t *testing.T) (*redislock.Store, *redislock.History, *redistest.Server) {
	t.Helper()
	srv := redistest.Start(t)
	s, h := redislock.Open(srv.Client(), redislock.Config{Prefix: "slotd", HistoryTTL: time.Hour})
	t.Cleanup(func() { h.Close(); s.Close() })
	return s, h, srv
}

// A success's entry rides on its completion: one script marks the slot
// done and appends the entry, with the stream's TTL; a call retried after
// a lost reply finds the slot done and appends nothing again; a caller
// that does not hold the slot appends nothing.
func TestCompleteRecordedAppendsWithTheCompletion(t *testing.T) {
	s, h, srv := opened(t)
	ctx := context.Background()
	p := lock.Policy{Lease: 5 * time.Second, DoneTTL: time.Minute, MaxAttempts: 3}
	slot := openSlot(t, s)
	c := claimWon(t, s, slot, "a", p)
	own := lock.Owner{ID: "a", Attempt: c.Attempt}
	e := entry(slot.ID, c.Attempt, "success", "")
	e.Output, e.Backfilled = "printed", true

	if _, err := h.CompleteRecorded(ctx, s, slot, lock.Owner{ID: "b", Attempt: c.Attempt}, p.DoneTTL, e); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("a stranger's recorded completion: %v, want ErrNotHeld", err)
	}
	for try := range 2 { // the second: a retry after a lost reply
		recorded, err := h.CompleteRecorded(ctx, s, slot, own, p.DoneTTL, e)
		if err != nil || !recorded {
			t.Fatalf("recorded completion, try %d: recorded %v, %v; want true, nil", try+1, recorded, err)
		}
	}
	st, err := lock.ReadState(ctx, s, slot)
	if err != nil || st.Status != "done" || st.Holder != "a" {
		t.Fatalf("state = %+v, %v; want done by a", st, err)
	}
	es, err := h.Recent(ctx, slot.Task, 10)
	if err != nil || len(es) != 1 {
		t.Fatalf("history = %+v, %v; want the one entry", es, err)
	}
	if got := es[0]; got.Slot != e.Slot || got.Attempt != e.Attempt || got.Outcome != "success" || got.Output != "printed" || !got.Backfilled || got.Token != e.Token {
		t.Errorf("entry read back = %+v, want %+v", got, e)
	}
	if ttl := srv.Client().PTTL(ctx, redislock.HistoryKey("slotd", slot.Task)).Val(); ttl <= 0 || ttl > time.Hour {
		t.Errorf("stream TTL = %v, want up to the history TTL (1h)", ttl)
	}
}

// Between TTL renewals an entry is appended with NOMKSTREAM; a stream
// that has gone meanwhile is made again, in the same script, with its TTL.
func TestCompleteRecordedRemakesAGoneStream(t *testing.T) {
	s, h, srv := opened(t)
	ctx := context.Background()
	p := lock.Policy{Lease: 5 * time.Second, DoneTTL: time.Minute, MaxAttempts: 3}
	key := redislock.HistoryKey("slotd", t.Name())
	for i, id := range []string{"1", "2", "3"} {
		slot := openSlot(t, s)
		slot.ID = id
		c := claimWon(t, s, slot, "a", p)
		if i == 1 || i == 2 {
			if err := srv.Client().Del(ctx, key).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if i == 2 {
			// A stream key of another type: the slot is done all the same,
			// and the caller is told to append the entry itself.
			if err := srv.Client().Set(ctx, key, "x", time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
		}
		recorded, err := h.CompleteRecorded(ctx, s, slot, lock.Owner{ID: "a", Attempt: c.Attempt}, p.DoneTTL, entry(id, c.Attempt, "success", ""))
		if err != nil || recorded != (i < 2) {
			t.Fatalf("slot %s: recorded %v, %v; want %v, nil", id, recorded, err, i < 2)
		}
		if st, err := lock.ReadState(ctx, s, slot); err != nil || st.Status != "done" {
			t.Fatalf("slot %s: state %+v, %v; want done", id, st, err)
		}
		if i == 1 {
			if ttl := srv.Client().PTTL(ctx, key).Val(); ttl <= 0 {
				t.Errorf("the stream made again has no TTL (%v)", ttl)
			}
			if n := srv.Client().XLen(ctx, key).Val(); n != 1 {
				t.Errorf("the stream made again holds %d entries, want 1", n)
			}
		}
	}
}

// Where the history's stream lives apart from the slot's keys (a Redis
// Cluster), or the history was not opened beside the store, the
// completion is the store's own and the caller appends the entry.
func TestCompleteRecordedFallsBackApart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := lock.Policy{Lease: 5 * time.Second, DoneTTL: time.Minute, MaxAttempts: 3}
	c := redistest.StartCluster(t, 3)
	cs, ch := redislock.Open(c.Client(), redislock.Config{Prefix: "slotd", HistoryTTL: time.Hour})
	defer cs.Close()
	defer ch.Close()
	other, _, _ := opened(t)
	_, h, _ := opened(t)
	for name, tc := range map[string]struct {
		s *redislock.Store
		h *redislock.History
	}{"cluster": {cs, ch}, "another store": {other, h}} {
		slot := openSlot(t, tc.s)
		won := claimWon(t, tc.s, slot, "a", p)
		recorded, err := tc.h.CompleteRecorded(ctx, tc.s, slot, lock.Owner{ID: "a", Attempt: won.Attempt}, p.DoneTTL, entry(slot.ID, won.Attempt, "success", ""))
		if err != nil || recorded {
			t.Errorf("%s: recorded %v, %v; want false, nil", name, recorded, err)
		}
		if st, err := lock.ReadState(ctx, tc.s, slot); err != nil || st.Status != "done" {
			t.Errorf("%s: state %+v, %v; want done", name, st, err)
		}
		if es, err := tc.h.Recent(ctx, slot.Task, 10); err != nil || len(es) != 0 {
			t.Errorf("%s: history %v, %v; want nothing appended", name, es, err)
		}
	}
}

// The attempts counter gets its TTL once, from the claim: the done TTL,
// and at least until the deadline; the completion leaves it alone.
func TestAttemptsCounterTTLSetOnceByTheClaim(t *testing.T) {
	r, srv := redisStore(t)
	ctx := context.Background()
	slot := openSlot(t, r) // deadline an hour ahead
	for _, p := range []lock.Policy{
		{Lease: 5 * time.Second, DoneTTL: 2 * time.Hour, MaxAttempts: 3},
		{Lease: 5 * time.Second, DoneTTL: time.Minute, MaxAttempts: 3}, // shorter than the window left
	} {
		slot.ID += "x"
		_, attempts := redislock.Keys("slotd", slot)
		c := claimWon(t, r, slot, "a", p)
		// The script counts in whole ms, the server's clock floored:
		// the rest of the window can read up to 1 ms over the local one.
		want := max(p.DoneTTL, time.Until(slot.Deadline))
		ttl := srv.Client().PTTL(ctx, attempts).Val()
		if ttl < want-5*time.Second || ttl > want+time.Millisecond {
			t.Errorf("done TTL %v: counter TTL after the claim = %v, want about %v", p.DoneTTL, ttl, want)
		}
		if err := r.Complete(ctx, slot, lock.Owner{ID: "a", Attempt: c.Attempt}, p.DoneTTL); err != nil {
			t.Fatal(err)
		}
		if after := srv.Client().PTTL(ctx, attempts).Val(); after > ttl {
			t.Errorf("done TTL %v: counter TTL after the completion = %v, above the claim's %v: the completion renewed it", p.DoneTTL, after, ttl)
		}
		if n := srv.Client().Get(ctx, attempts).Val(); n != "1" {
			t.Errorf("counter = %q, want 1", n)
		}
	}
}

// Completions with and without an entry, made at once, share round trips
// (each shape fused apart): every slot ends done, and only the ones that
// brought an entry are in the history.
func TestCompleteRecordedBesidePlainCompletions(t *testing.T) {
	s, h, _ := opened(t)
	ctx := context.Background()
	p := lock.Policy{Lease: 5 * time.Second, DoneTTL: time.Minute, MaxAttempts: 3}
	const n = 64
	slots := make([]lock.Slot, n)
	for i := range slots {
		slots[i] = openSlot(t, s)
		slots[i].ID = strconv.Itoa(i)
		claimWon(t, s, slots[i], "a", p)
	}
	errs := make(chan error, n)
	for i, slot := range slots {
		go func() {
			own := lock.Owner{ID: "a", Attempt: 1}
			if i%2 == 1 {
				errs <- s.Complete(ctx, slot, own, p.DoneTTL)
				return
			}
			recorded, err := h.CompleteRecorded(ctx, s, slot, own, p.DoneTTL, entry(slot.ID, 1, "success", ""))
			if err == nil && !recorded {
				err = fmt.Errorf("slot %s: not recorded", slot.ID)
			}
			errs <- err
		}()
	}
	for range slots {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	for _, slot := range slots {
		if st, err := lock.ReadState(ctx, s, slot); err != nil || st.Status != "done" {
			t.Errorf("slot %s: state %+v, %v; want done", slot.ID, st, err)
		}
	}
	es, err := h.Recent(ctx, t.Name(), 2*n)
	if err != nil || len(es) != n/2 {
		t.Fatalf("history: %d entries, %v; want %d", len(es), err, n/2)
	}
	for _, e := range es {
		if i, _ := strconv.Atoi(e.Slot); i%2 != 0 {
			t.Errorf("entry of slot %s, which was completed without one", e.Slot)
		}
	}
}

// An entry a completion appends (complete.lua, its field names its own)
// has the fields, in the order, of one the history appends apart: the
// same entry, whichever way it was written. (Each case's entries are the
// newest of their streams.)
func TestCompleteRecordedWritesTheFieldsAnAppendDoes(t *testing.T) {
	s, h, srv := opened(t)
	ctx := context.Background()
	p := lock.Policy{Lease: 5 * time.Second, DoneTTL: time.Minute, MaxAttempts: 3}
	raw := func(task string) []any {
		t.Helper()
		v, err := srv.Client().Do(ctx, "XREVRANGE", redislock.HistoryKey("slotd", task), "+", "-", "COUNT", 1).Slice()
		if err != nil || len(v) != 1 {
			t.Fatalf("XREVRANGE %s = %v, %v; want its newest entry", task, v, err)
		}
		return v[0].([]any)[1].([]any)
	}
	for _, c := range []struct {
		name       string
		output     string
		backfilled bool
	}{{"plain", "", false}, {"output", "printed\n", false}, {"backfilled", "", true}, {"both", "x", true}} {
		slot := openSlot(t, s)
		slot.ID = c.name
		won := claimWon(t, s, slot, "a", p)
		e := entry(slot.ID, won.Attempt, "success", "")
		e.Output, e.Backfilled = c.output, c.backfilled
		if recorded, err := h.CompleteRecorded(ctx, s, slot, lock.Owner{ID: "a", Attempt: won.Attempt}, p.DoneTTL, e); err != nil || !recorded {
			t.Fatalf("%s: recorded %v, %v; want true, nil", c.name, recorded, err)
		}
		apart := slot.Task + "-apart"
		if err := h.Append(ctx, apart, e); err != nil {
			t.Fatalf("%s: append: %v", c.name, err)
		}
		if got, want := fmt.Sprint(raw(slot.Task)), fmt.Sprint(raw(apart)); got != want {
			t.Errorf("%s: the completion wrote %s, the history apart %s", c.name, got, want)
		}
	}
}
