package redislock_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/lock/redislock"
)

// kvRecordOn reads name's record in dir on one master: its version, or ""
// when the key is gone.
func kvRecordOn(t *testing.T, c *redis.Client, dir, name string) string {
	t.Helper()
	raw, err := c.Get(context.Background(), "slotd:kv:"+dir+"/"+name).Result()
	if err == redis.Nil {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(raw), &rec); err != nil {
		t.Fatalf("record %q: %v", raw, err)
	}
	return rec.ID
}

// plantKV writes a record of version id straight onto one master, as a
// writer that crashed between its write and its undo leaves it.
func plantKV(t *testing.T, c *redis.Client, dir, name string, id int64, value string) {
	t.Helper()
	rec, _ := json.Marshal(map[string]any{"id": strconv.FormatInt(id, 10), "v": value, "del": false, "pid": "0", "pv": "", "pdel": false, "px": 0})
	ctx := context.Background()
	if err := c.Set(ctx, "slotd:kv:"+dir+"/"+name, rec, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.ZAdd(ctx, "slotd:kv:"+dir, redis.Z{Score: float64(time.Now().Add(time.Hour).UnixMilli()), Member: name}).Err(); err != nil {
		t.Fatal(err)
	}
}

// Writers racing from one version: at most one reaches a quorum, the
// losers' writes are taken back, and a read answers the winner's value
// (or, when the vote split and nobody won, the value raced from).
func TestRedlockKVConcurrentPutsOneWinner(t *testing.T) {
	t.Parallel()
	_, clients := startNodes(t, 3)
	s := redislock.RedlockKV(newRedlock(t, clients))
	ctx := context.Background()
	if ok, err := s.Put(ctx, "d", "n", "start", 0, time.Hour); err != nil || !ok {
		t.Fatalf("first put = %v, %v", ok, err)
	}
	won := 0
	for round := range 30 {
		e, err := s.Get(ctx, "d", "n")
		if err != nil {
			t.Fatalf("round %d: get: %v", round, err)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		var winners []string
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				v := "r" + strconv.Itoa(round) + "w" + strconv.Itoa(w)
				ok, err := s.Put(ctx, "d", "n", v, e.Version, time.Hour)
				if err != nil {
					t.Errorf("round %d writer %d: %v", round, w, err)
				}
				if ok {
					mu.Lock()
					winners = append(winners, v)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		after, err := s.Get(ctx, "d", "n")
		if err != nil {
			t.Fatalf("round %d: get after: %v", round, err)
		}
		switch len(winners) {
		case 0:
			if after.Version != e.Version || after.Value != e.Value {
				t.Fatalf("round %d: nobody won, read %+v, want %+v back", round, after, e)
			}
		case 1:
			won++
			if after.Value != winners[0] {
				t.Fatalf("round %d: %s won, read %+v", round, winners[0], after)
			}
		default:
			t.Fatalf("round %d: %d writers won from one version: %v", round, len(winners), winners)
		}
	}
	if won == 0 {
		t.Fatal("no round had a winner")
	}
	t.Logf("%d of 30 rounds of 8 writers had a winner", won)
}

// With one master of three down, reads and writes go on; it comes back
// empty and a read still answers; the next write brings it up to date.
func TestRedlockKVOneMasterDown(t *testing.T) {
	t.Parallel()
	srvs, clients := startNodes(t, 3)
	s := redislock.RedlockKV(newRedlock(t, clients))
	ctx := context.Background()
	srvs[2].Stop()
	if ok, err := s.Put(ctx, "d", "a", "1", 0, time.Hour); err != nil || !ok {
		t.Fatalf("put with a master down = %v, %v", ok, err)
	}
	e, err := s.Get(ctx, "d", "a")
	if err != nil || e.Value != "1" || e.Version == 0 || e.TTL <= 0 {
		t.Fatalf("get with a master down = %+v, %v", e, err)
	}
	if ok, err := s.Put(ctx, "d", "b", "2", 0, time.Hour); err != nil || !ok {
		t.Fatalf("second put = %v, %v", ok, err)
	}
	all, err := s.List(ctx, "d")
	if err != nil || len(all) != 2 || all["a"].Value != "1" || all["b"].Value != "2" {
		t.Fatalf("list with a master down = %+v, %v", all, err)
	}
	if ok, err := s.Delete(ctx, "d", "b", all["b"].Version); err != nil || !ok {
		t.Fatalf("delete with a master down = %v, %v", ok, err)
	}
	srvs[2].Restart() // empty: it missed every write
	if e2, err := s.Get(ctx, "d", "a"); err != nil || e2.Version != e.Version {
		t.Fatalf("get after the restart = %+v, %v; want version %d", e2, err, e.Version)
	}
	for deadline := time.Now().Add(10 * time.Second); clients[2].Ping(ctx).Err() != nil; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the restarted master does not answer")
		}
	}
	if got := kvRecordOn(t, clients[2], "d", "a"); got != "" {
		t.Fatalf("restarted master holds %q", got)
	}
	if ok, err := s.Put(ctx, "d", "a", "3", e.Version, time.Hour); err != nil || !ok {
		t.Fatalf("put after the restart = %v, %v", ok, err)
	}
	e3, err := s.Get(ctx, "d", "a")
	if err != nil || e3.Value != "3" {
		t.Fatalf("get = %+v, %v", e3, err)
	}
	for i, c := range clients {
		if got := kvRecordOn(t, c, "d", "a"); got != strconv.FormatInt(e3.Version, 10) {
			t.Errorf("master %d holds version %q, want %d (repaired by the write)", i, got, e3.Version)
		}
	}
	// Every master but one agreeing is enough: the other down again, the
	// repaired one votes.
	srvs[0].Stop()
	if e4, err := s.Get(ctx, "d", "a"); err != nil || e4.Version != e3.Version {
		t.Fatalf("get with master 0 down after the repair = %+v, %v", e4, err)
	}
}

// A master holding a version the others do not (a writer crashed before
// its undo) is outvoted by the two that agree, and the next write repairs
// it; a write that lands on one master only is taken back and reported
// lost.
func TestRedlockKVStaleOutvotedMinorityUndone(t *testing.T) {
	t.Parallel()
	_, clients := startNodes(t, 3)
	s := redislock.RedlockKV(newRedlock(t, clients))
	ctx := context.Background()
	if ok, err := s.Put(ctx, "d", "n", "good", 0, time.Hour); err != nil || !ok {
		t.Fatalf("put = %v, %v", ok, err)
	}
	good, _ := s.Get(ctx, "d", "n")
	plantKV(t, clients[0], "d", "n", 12345, "leftover")
	e, err := s.Get(ctx, "d", "n")
	if err != nil || e.Version != good.Version || e.Value != "good" {
		t.Fatalf("get with a stale master = %+v, %v; want %+v", e, err, good)
	}
	all, err := s.List(ctx, "d")
	if err != nil || all["n"].Value != "good" {
		t.Fatalf("list with a stale master = %+v, %v", all, err)
	}
	if ok, err := s.Put(ctx, "d", "n", "next", good.Version, time.Hour); err != nil || !ok {
		t.Fatalf("put from the quorum's version = %v, %v", ok, err)
	}
	next, _ := s.Get(ctx, "d", "n")
	if got := kvRecordOn(t, clients[0], "d", "n"); got != strconv.FormatInt(next.Version, 10) {
		t.Fatalf("stale master holds %q after a write, want %d", got, next.Version)
	}

	// Masters 1 and 2 hold another version: a write from next lands on
	// master 0 alone, is lost, and is taken back there.
	plantKV(t, clients[1], "d", "n", 777, "other")
	plantKV(t, clients[2], "d", "n", 777, "other")
	ok, err := s.Put(ctx, "d", "n", "minority", next.Version, time.Hour)
	if err != nil || ok {
		t.Fatalf("minority put = %v, %v; want lost", ok, err)
	}
	if got := kvRecordOn(t, clients[0], "d", "n"); got != strconv.FormatInt(next.Version, 10) {
		t.Fatalf("master 0 holds %q after the lost write, want %d back", got, next.Version)
	}
	if e, err := s.Get(ctx, "d", "n"); err != nil || e.Version != 777 || e.Value != "other" {
		t.Fatalf("get = %+v, %v; want the two masters' version 777", e, err)
	}
	// No two masters agreeing: a read says so, naming the entry.
	plantKV(t, clients[2], "d", "n", 888, "third")
	if _, err := s.Get(ctx, "d", "n"); err == nil || !errors.Is(err, redislock.ErrNoQuorum) {
		t.Fatalf("get with three versions = %v, want ErrNoQuorum", err)
	}
}

// OnChange hears a write made after it returned.
func TestRedlockKVOnChange(t *testing.T) {
	t.Parallel()
	_, clients := startNodes(t, 3)
	s := redislock.RedlockKV(newRedlock(t, clients))
	heard := make(chan struct{}, 8)
	stop := s.OnChange("d", "n", func() {
		select {
		case heard <- struct{}{}:
		default:
		}
	})
	defer stop()
	members := make(chan struct{}, 8)
	stopM := s.OnMembers("d", func() {
		select {
		case members <- struct{}{}:
		default:
		}
	})
	defer stopM()
	if ok, err := s.Put(context.Background(), "d", "n", "v", 0, time.Hour); err != nil || !ok {
		t.Fatalf("put = %v, %v", ok, err)
	}
	for what, ch := range map[string]chan struct{}{"the write": heard, "the new member": members} {
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatalf("no notice of %s", what)
		}
	}
}

// With two masters of three down a write cannot know its outcome: it
// fails with ErrNoQuorum, and is taken back on the master that took it.
func TestRedlockKVTwoMastersDownUnknown(t *testing.T) {
	t.Parallel()
	srvs, clients := startNodes(t, 3)
	s := redislock.RedlockKV(newRedlock(t, clients))
	ctx := context.Background()
	if ok, err := s.Put(ctx, "d", "n", "v1", 0, time.Hour); err != nil || !ok {
		t.Fatalf("put = %v, %v", ok, err)
	}
	e, _ := s.Get(ctx, "d", "n")
	srvs[1].Stop()
	srvs[2].Stop()
	ok, err := s.Put(ctx, "d", "n", "v2", e.Version, time.Hour)
	if ok || !errors.Is(err, redislock.ErrNoQuorum) {
		t.Fatalf("put with two masters down = %v, %v; want ErrNoQuorum", ok, err)
	}
	if got := kvRecordOn(t, clients[0], "d", "n"); got != strconv.FormatInt(e.Version, 10) {
		t.Fatalf("live master holds %q, want %d back", got, e.Version)
	}
	if _, err := s.Get(ctx, "d", "n"); !errors.Is(err, redislock.ErrNoQuorum) {
		t.Fatalf("get with two masters down = %v, want ErrNoQuorum", err)
	}
}
