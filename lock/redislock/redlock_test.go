package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/internal/kv"
	"github.com/slotd/slotd/lock/locktest"
	"github.com/slotd/slotd/lock/redislock"
)

// startNodes starts n independent redis-servers and returns them with a
// client of each.
func startNodes(t testing.TB, n int) ([]*redistest.Server, []*redis.Client) {
	var srvs []*redistest.Server
	var clients []*redis.Client
	for range n {
		s := redistest.Start(t)
		srvs = append(srvs, s)
		clients = append(clients, s.Client())
	}
	return srvs, clients
}

// newRedlock is a Redlock store on clients under the prefix "slotd", closed
// at cleanup.
func newRedlock(t *testing.T, clients []*redis.Client, opts ...redislock.RedlockOption) *redislock.Redlock {
	nodes := make([]redislock.Client, len(clients))
	for i, c := range clients {
		nodes[i] = c
	}
	r, err := redislock.NewRedlock(nodes, "slotd", opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// redlockHarness is the conformance harness on five independent servers:
// time passes, values are planted and TTLs are read on every node.
func redlockHarness(t *testing.T) locktest.Harness { return redlockHarnessOf(t, 5) }

// redlockHarnessOf is redlockHarness on n servers.
func redlockHarnessOf(t *testing.T, n int) locktest.Harness {
	ctx := context.Background()
	_, clients := startNodes(t, n)
	r := newRedlock(t, clients)
	if err := r.Subscribe(ctx); err != nil {
		t.Fatal(err)
	}
	each := func(f func(i int, c *redis.Client)) {
		for i, c := range clients {
			f(i, c)
		}
	}
	plant := func(k, v string) {
		each(func(_ int, c *redis.Client) { c.Set(ctx, k, v, time.Hour) })
	}
	return locktest.Harness{
		Store: r,
		Split: func(err error) bool { return errors.Is(err, redislock.ErrNoQuorum) },
		Now: func() time.Time {
			tm, err := r.Time(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return tm
		},
		Expire: func(d time.Duration) {
			each(func(_ int, c *redis.Client) {
				for _, k := range c.Keys(ctx, "*").Val() {
					if ttl := c.PTTL(ctx, k).Val(); ttl <= d {
						c.Del(ctx, k)
					} else {
						c.PExpire(ctx, k, ttl-d)
					}
				}
			})
		},
		TTLs: func() map[string]time.Duration {
			out := map[string]time.Duration{}
			each(func(i int, c *redis.Client) {
				for _, k := range c.Keys(ctx, "*").Val() {
					out["node"+strconv.Itoa(i)+" "+k] = c.PTTL(ctx, k).Val()
				}
			})
			return out
		},
		PlantState:    func(s lock.Slot, v string) { st, _ := redislock.Keys("slotd", s); plant(st, v) },
		PlantAttempts: func(s lock.Slot, v string) { _, at := redislock.Keys("slotd", s); plant(at, v) },
		PlantTriggerKeys: func(task string, keys []string) {
			now, err := r.Time(ctx)
			if err == nil {
				err = kv.PlantTriggerKeys(ctx, redislock.RedlockKV(r), task, now.Unix(), keys)
			}
			if err != nil {
				t.Fatal(err)
			}
		},
	}
}

var redlockSeq atomic.Int64

// redlockSlot is a slot open now, unique to the test.
func redlockSlot(t *testing.T) lock.Slot {
	now := time.Now()
	return lock.Slot{
		Task:     fmt.Sprintf("%s-%d", strings.ReplaceAll(t.Name(), "/", "."), redlockSeq.Add(1)),
		ID:       now.UTC().Format("20060102150405"),
		Time:     now.Add(-time.Minute),
		Deadline: now.Add(time.Hour),
	}
}

// nodeKeys reads slot's state and attempts keys on every node ("" when
// missing).
func nodeKeys(t *testing.T, clients []*redis.Client, slot lock.Slot) (states, attempts []string) {
	ctx := context.Background()
	state, att := redislock.Keys("slotd", slot)
	for _, c := range clients {
		states = append(states, c.Get(ctx, state).Val())
		attempts = append(attempts, c.Get(ctx, att).Val())
	}
	return states, attempts
}

// answeredClaim claims until a quorum answers: go-redis redials a node it
// gave up on (while it was down) within about a second of a restart.
func answeredClaim(t *testing.T, r *redislock.Redlock, slot lock.Slot, replica string, p lock.Policy) lock.Claim {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := r.Claim(context.Background(), slot, replica, p)
		if err == nil {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("no claim of %s answered by a quorum within 30s: %v", slot, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// With 2 of 5 nodes down a slot is still claimed, held, completed and seen
// done, and a release published by the nodes still up wakes a watcher.
func TestRedlockTwoOfFiveDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srvs, clients := startNodes(t, 5)
	r := newRedlock(t, clients)
	srvs[1].Stop()
	srvs[3].Stop()
	slot := redlockSlot(t)
	w := r.Watch(slot)
	defer w.Stop()
	a, err := r.Claim(ctx, slot, "a", policy)
	if err != nil || a.Result != lock.Won || a.Attempt != 1 {
		t.Fatalf("claim with 3 of 5 up = %+v, %v; want won attempt 1", a, err)
	}
	if c, err := r.Claim(ctx, slot, "b", policy); err != nil || c.Result != lock.Held || c.Holder != "a" {
		t.Fatalf("second claim = %+v, %v; want held by a", c, err)
	}
	own := lock.Owner{ID: "a", Attempt: 1}
	if err := r.Renew(ctx, slot, own, policy.Lease); err != nil {
		t.Fatalf("renew on 3 of 5: %v", err)
	}
	if err := r.Release(ctx, slot, own); err != nil {
		t.Fatalf("release on 3 of 5: %v", err)
	}
	select {
	case <-w.C():
	case <-time.After(10 * time.Second):
		t.Fatal("watcher not woken within 10s of a release on 3 of 5 nodes")
	}
	b, err := r.Claim(ctx, slot, "b", policy)
	if err != nil || b.Result != lock.Won || b.Attempt != 2 {
		t.Fatalf("claim after the release = %+v, %v; want won attempt 2", b, err)
	}
	if err := r.Complete(ctx, slot, lock.Owner{ID: "b", Attempt: 2}, policy.DoneTTL); err != nil {
		t.Fatalf("complete on 3 of 5: %v", err)
	}
	if c, err := r.Claim(ctx, slot, "c", policy); err != nil || c.Result != lock.Done || c.Holder != "b" || c.Attempt != 2 {
		t.Fatalf("claim of the done slot = %+v, %v; want done by b attempt 2", c, err)
	}
	if st, err := lock.ReadState(ctx, r, slot); err != nil || st.Status != "done" || st.Attempts != 2 {
		t.Fatalf("state = %+v, %v; want done after 2 attempts", st, err)
	}
}

// With 3 of 5 nodes down nothing is won and nothing is counted: the two
// nodes up give their grants back with the attempts they counted.
func TestRedlockThreeOfFiveDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srvs, clients := startNodes(t, 5)
	r := newRedlock(t, clients)
	for _, i := range []int{0, 2, 4} {
		srvs[i].Stop()
	}
	slot := redlockSlot(t)
	for range 5 {
		c, err := r.Claim(ctx, slot, "a", policy)
		if !errors.Is(err, redislock.ErrNoQuorum) || c.Result == lock.Won {
			t.Fatalf("claim with 2 of 5 up = %+v, %v; want ErrNoQuorum", c, err)
		}
	}
	states, attempts := nodeKeys(t, clients[1:2], slot)
	s2, a2 := nodeKeys(t, clients[3:4], slot)
	if states[0]+s2[0]+attempts[0]+a2[0] != "" {
		t.Fatalf("failed rounds left keys on the nodes up: states %q %q, attempts %q %q", states, s2, attempts, a2)
	}
	if _, err := r.Time(ctx); !errors.Is(err, redislock.ErrNoQuorum) {
		t.Fatalf("time from 2 of 5: %v, want ErrNoQuorum", err)
	}
	if _, err := lock.ReadState(ctx, r, slot); !errors.Is(err, redislock.ErrNoQuorum) {
		t.Fatalf("state from 2 of 5: %v, want ErrNoQuorum", err)
	}
	for _, i := range []int{0, 2, 4} {
		srvs[i].Restart()
	}
	c := answeredClaim(t, r, slot, "a", policy)
	if c.Result != lock.Won || c.Attempt != 1 {
		t.Fatalf("claim after recovery = %+v; want won attempt 1 (the failed rounds counted nothing)", c)
	}
}

// Nodes restarted empty, a minority at a time, count attempts from zero
// again; the quorum's attempt is the highest a winner counted, every
// winner is renumbered to it, and no fencing token repeats.
func TestRedlockTokensGrowPastEmptyNodes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srvs, clients := startNodes(t, 5)
	r := newRedlock(t, clients)
	slot := redlockSlot(t)
	p := policy
	p.MaxAttempts = 10
	var tokens []int64
	for round, restart := range [][]int{{0, 1}, {2, 3}, {4, 0}, {1, 2}} {
		replica := "r" + strconv.Itoa(round)
		c := answeredClaim(t, r, slot, replica, p)
		if c.Result != lock.Won {
			t.Fatalf("round %d: claim = %+v", round, c)
		}
		tokens = append(tokens, lock.Token(slot.Time, c.Attempt))
		states, attempts := nodeKeys(t, clients, slot)
		want := "run:" + replica + ":" + strconv.Itoa(c.Attempt)
		for i := range clients {
			if states[i] != want || attempts[i] != strconv.Itoa(c.Attempt) {
				t.Fatalf("round %d: node %d holds %q with %q attempts; want %q with %d on every node",
					round, i, states[i], attempts[i], want, c.Attempt)
			}
		}
		if err := r.Release(ctx, slot, lock.Owner{ID: replica, Attempt: c.Attempt}); err != nil {
			t.Fatal(err)
		}
		for _, i := range restart {
			srvs[i].Restart() // empty: it forgot the slot
		}
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("fencing tokens %v: not strictly increasing", tokens)
		}
	}
}

// A claim whose round outlasts its validity (a node stalled past the
// lease) is not won, and the grants it did get are given back.
func TestRedlockLateRoundIsNotWon(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srvs, clients := startNodes(t, 5)
	r := newRedlock(t, clients, redislock.WithNodeTimeout(2*time.Second))
	srvs[4].Signal(syscall.SIGSTOP)
	defer srvs[4].Signal(syscall.SIGCONT)
	slot := redlockSlot(t)
	p := policy
	p.Lease = 200 * time.Millisecond // the stalled node costs the round its 2s timeout
	c, err := r.Claim(ctx, slot, "a", p)
	if err == nil || c.Result == lock.Won {
		t.Fatalf("claim past its validity = %+v, %v; want an error", c, err)
	}
	if !strings.Contains(err.Error(), "validity") {
		t.Errorf("error %q does not say the validity ran out", err)
	}
	states, attempts := nodeKeys(t, clients[:4], slot)
	for i := range 4 {
		if states[i] != "" || attempts[i] != "" {
			t.Fatalf("node %d kept %q, attempts %q after a late round", i, states[i], attempts[i])
		}
	}
}

// Split votes: a node granted to another contender counts as held, and a
// claim that no quorum answers alike is an ErrNoQuorum that leaves the
// grants it got undone.
func TestRedlockSplitVoteUndone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srvs, clients := startNodes(t, 5)
	r := newRedlock(t, clients)
	slot := redlockSlot(t)
	state, att := redislock.Keys("slotd", slot)
	for _, c := range clients[:2] { // x holds two nodes: a stale grant
		c.Set(ctx, state, "run:x:1", time.Minute)
		c.Set(ctx, att, "1", time.Hour)
	}
	srvs[3].Stop()
	srvs[4].Stop()
	_, err := r.Claim(ctx, slot, "a", policy)
	if !errors.Is(err, redislock.ErrNoQuorum) {
		t.Fatalf("2 held, 1 granted, 2 down: %v, want ErrNoQuorum", err)
	}
	if states, attempts := nodeKeys(t, clients[2:3], slot); states[0] != "" || attempts[0] != "" {
		t.Fatalf("node 2 kept %q, attempts %q", states[0], attempts[0])
	}
	srvs[3].Restart()
	if _, err := r.Claim(ctx, slot, "a", policy); !errors.Is(err, redislock.ErrNoQuorum) {
		t.Fatalf("2 held, 2 granted, 1 down: %v, want ErrNoQuorum", err)
	}
	srvs[4].Restart()
	if c := answeredClaim(t, r, slot, "a", policy); c.Result != lock.Won || c.Attempt != 1 {
		t.Fatalf("2 held, 3 granted = %+v; want won attempt 1", c)
	}
	for _, cl := range clients[:2] {
		cl.Set(ctx, state, "run:x:1", time.Minute)
	}
	if c, err := r.Claim(ctx, slot, "b", policy); err != nil || c.Result != lock.Held || c.Holder != "a" {
		t.Fatalf("claim while a holds 3 of 5 = %+v, %v; want held by a", c, err)
	}
}

// publishes is how many PUBLISH commands the server behind c has run
// (scripts' included).
func publishes(t *testing.T, c *redis.Client) int { return calls(t, c, "publish") }

// calls is how many commands name (lower case) the server behind c has run.
func calls(t *testing.T, c *redis.Client, name string) int {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(info, "cmdstat_"+name+":calls=")
	if !ok {
		return 0
	}
	n, err := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A grant given back wakes nobody: not when a quorum names one holder
// (the watchers would claim, grant the free node, give it back and wake
// each other without end), not after a split vote (the contenders retry
// after a random delay; woken together they would split again), nor when
// too few nodes answer for anyone to win. Nodes held by different
// contenders are a split vote, not a holder.
func TestRedlockUndoWakesNobody(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srvs, clients := startNodes(t, 3)
	r := newRedlock(t, clients)
	held := redlockSlot(t)
	srvs[0].Stop()
	if c := answeredClaim(t, r, held, "a", policy); c.Result != lock.Won {
		t.Fatalf("claim on nodes 1 and 2 = %+v", c)
	}
	srvs[0].Restart() // free of the slot
	before := publishes(t, clients[0])
	if c := answeredClaim(t, r, held, "b", policy); c.Result != lock.Held || c.Holder != "a" {
		t.Fatalf("claim while a holds 2 of 3 = %+v, want held by a", c)
	}
	if states, attempts := nodeKeys(t, clients[:1], held); states[0] != "" || attempts[0] != "" {
		t.Fatalf("node 0 kept b's grant %q, attempts %q", states[0], attempts[0])
	}
	if n := publishes(t, clients[0]) - before; n != 0 {
		t.Errorf("giving back a grant while a holds a quorum published %d releases, want none", n)
	}

	split := redlockSlot(t)
	state, _ := redislock.Keys("slotd", split)
	clients[1].Set(ctx, state, "run:x:1", time.Minute)
	clients[2].Set(ctx, state, "run:y:1", time.Minute)
	before = publishes(t, clients[0])
	if c, err := r.Claim(ctx, split, "b", policy); !errors.Is(err, redislock.ErrNoQuorum) {
		t.Fatalf("claim with x and y holding a node each = %+v, %v; want ErrNoQuorum", c, err)
	}
	if n := publishes(t, clients[0]) - before; n != 0 {
		t.Errorf("giving back a grant after a split vote published %d releases, want none", n)
	}
	if states, attempts := nodeKeys(t, clients[:1], split); states[0] != "" || attempts[0] != "" {
		t.Fatalf("node 0 kept b's grant %q, attempts %q after a split vote", states[0], attempts[0])
	}

	srvs[1].Stop()
	srvs[2].Stop()
	before = publishes(t, clients[0])
	if _, err := r.Claim(ctx, redlockSlot(t), "b", policy); !errors.Is(err, redislock.ErrNoQuorum) {
		t.Fatalf("claim on 1 of 3: %v, want ErrNoQuorum", err)
	}
	if n := publishes(t, clients[0]) - before; n != 0 {
		t.Errorf("giving back a grant with 1 of 3 nodes up published %d releases, want none", n)
	}
}

// BenchmarkRedlock prices Redlock: the success cycle (claim + complete) on
// one server (redislock.Store, the baseline) and on Redlock stores of 3 and 5
// local servers, in the same run:
//
//	go test -run '^$' -bench Redlock -benchtime 2s ./lock/
func BenchmarkRedlock(b *testing.B) {
	var clients []redislock.Client
	for range 5 {
		s := redistest.Start(b)
		c := redis.NewClient(&redis.Options{Addr: s.Addr, PoolSize: 64, ContextTimeoutEnabled: true})
		b.Cleanup(func() { c.Close() })
		clients = append(clients, c)
	}
	p := lock.Policy{Lease: 10 * time.Second, DoneTTL: time.Minute, MaxAttempts: 3}
	ctx := context.Background()
	now := time.Now()
	for _, bc := range []struct {
		name  string
		nodes int
	}{{"Single", 1}, {"Redlock3", 3}, {"Redlock5", 5}} {
		var s lock.Store = redislock.New(clients[0], "slotd")
		if bc.nodes > 1 {
			r, err := redislock.NewRedlock(clients[:bc.nodes], "slotd")
			if err != nil {
				b.Fatal(err)
			}
			s = r
		}
		seqPar(b, bc.name, claimComplete(ctx, s, p, now))
	}
}

// Reads need only a quorum: with one node stalled, Time and States answer
// from the others without waiting out that node's timeout.
func TestRedlockReadsDoNotWaitForAStalledNode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srvs, clients := startNodes(t, 3)
	r := newRedlock(t, clients, redislock.WithNodeTimeout(time.Minute))
	slot := redlockSlot(t)
	if c := answeredClaim(t, r, slot, "a", policy); c.Result != lock.Won {
		t.Fatalf("claim = %+v", c)
	}
	srvs[2].Signal(syscall.SIGSTOP)
	defer srvs[2].Signal(syscall.SIGCONT)
	start := time.Now()
	if _, err := r.Time(ctx); err != nil {
		t.Fatalf("time with 1 of 3 stalled: %v", err)
	}
	if st, err := lock.ReadState(ctx, r, slot); err != nil || st.Status != "running" || st.Holder != "a" {
		t.Fatalf("state with 1 of 3 stalled = %+v, %v", st, err)
	}
	// Far below the one-minute node timeout they would have waited.
	if took := time.Since(start); took > 30*time.Second {
		t.Fatalf("reads took %v with a stalled node", took)
	}
}

// Slots due together are claimed with lock.ClaimMany; a Redlock store,
// which cannot batch across its nodes, claims each through Claim: each
// slot is won, held alike on every node.
func TestRedlockClaimMany(t *testing.T) {
	ctx := context.Background()
	_, clients := startNodes(t, 3)
	r := newRedlock(t, clients, redislock.WithNodeTimeout(5*time.Second))
	const n = 100
	reqs := make([]lock.ClaimRequest, n)
	for i := range reqs {
		reqs[i] = lock.ClaimRequest{Slot: redlockSlot(t), Owner: "r", Policy: policy}
	}
	replies := make([]lock.ClaimReply, n)
	lock.ClaimMany(ctx, r, reqs, func(i int, rep lock.ClaimReply) { replies[i] = rep })
	for i, rep := range replies {
		slot := reqs[i].Slot
		if rep.Err != nil || rep.Result != lock.Won {
			t.Fatalf("slot %d: %+v, %v; want won", i, rep.Claim, rep.Err)
		}
		states, _ := nodeKeys(t, clients, slot)
		for j, v := range states {
			if v != "run:r:1" {
				t.Errorf("slot %d: node %d holds %q, want run:r:1", i, j, v)
			}
		}
	}
}
