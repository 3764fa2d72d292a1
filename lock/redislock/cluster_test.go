package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/locktest"
	"github.com/slotd/slotd/lock/redislock"
)

// clusterKeys lists the keys of every master of the cluster, and which
// master holds each.
func clusterKeys(t *testing.T, rdb *redis.ClusterClient) map[string]string {
	var mu sync.Mutex
	out := map[string]string{}
	err := rdb.ForEachMaster(context.Background(), func(ctx context.Context, node *redis.Client) error {
		ks, err := node.Keys(ctx, "*").Result()
		mu.Lock()
		defer mu.Unlock()
		for _, k := range ks {
			out[k] = node.Options().Addr
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The conformance suite on a 3-master Redis Cluster: each slot's keys share
// a hash tag, so every script touches one shard (a CROSSSLOT error would
// fail the claim), releases published on one shard reach the subscriber
// connected to another, and States pipelines across shards. The slots of
// the suite land on more than one master.
func TestConformanceCluster(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 3)
	rdb := c.Client()
	keys := func() []string {
		m := clusterKeys(t, rdb)
		out := make([]string, 0, len(m))
		for k := range m {
			out = append(out, k)
		}
		return out
	}
	h := clientHarness(t, rdb, redislock.New(rdb, "slotd"), keys)
	locktest.Run(t, h)
	masters := map[string]int{}
	for k, addr := range clusterKeys(t, rdb) {
		if strings.HasPrefix(k, "slotd:{") {
			masters[addr]++
		}
	}
	t.Logf("slot keys per master: %v", masters)
	if len(masters) < 2 {
		t.Errorf("the suite's slot keys all landed on %d master(s) %v: the cluster was not exercised", len(masters), masters)
	}
}

// subscribed returns a store on rdb, subscribed to releases and closed at
// cleanup, and the server's time.
func subscribed(t *testing.T, rdb redislock.Client, opts ...redislock.Option) (*redislock.Store, time.Time) {
	t.Helper()
	r := redislock.New(rdb, "slotd", opts...)
	t.Cleanup(func() { r.Close() })
	ctx := context.Background()
	if err := r.Subscribe(ctx); err != nil {
		t.Fatal(err)
	}
	now, err := r.Time(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return r, now
}

// Releases are published on the shard of the slot's keys; a subscriber
// connected elsewhere is woken all the same (Cluster broadcasts PUBLISH),
// for slots on every master.
func TestClusterReleaseWakesAcrossShards(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 3)
	rdb := c.Client()
	r, now := subscribed(t, rdb)
	ctx := context.Background()
	shards := map[string]bool{}
	for i := 0; len(shards) < 3; i++ {
		if i > 200 {
			t.Fatalf("200 slots hashed to only %d masters", len(shards))
		}
		slot := lock.Slot{Task: "wake-" + string(rune('a'+i%26)) + strings.Repeat("x", i/26), ID: "1",
			Time: now.Add(-time.Second), Deadline: now.Add(time.Hour)}
		state, _ := redislock.Keys("slotd", slot)
		node, err := rdb.MasterForKey(ctx, state)
		if err != nil {
			t.Fatal(err)
		}
		addr := node.Options().Addr
		if shards[addr] {
			continue
		}
		shards[addr] = true
		w := r.Watch(slot)
		cl, err := r.Claim(ctx, slot, "a", policy)
		if err != nil || cl.Result != lock.Won {
			t.Fatalf("claim on %s: %v, %v", addr, cl.Result, err)
		}
		if err := r.Release(ctx, slot, lock.Owner{ID: "a", Attempt: cl.Attempt}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-w.C():
		case <-time.After(10 * time.Second):
			t.Fatalf("release of a slot on master %s did not wake its watcher within 10s", addr)
		}
		w.Stop()
	}
}

// The conformance suite with WithMinReplicasAck(1) on a master with one
// live replica: every won claim and complete waits for the replica, and
// the protocol is unchanged.
func TestConformanceReplicasAck(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	redistest.StartReplica(t, srv)
	rdb := srv.Client()
	h := clientHarness(t, rdb, redislock.New(rdb, "slotd", redislock.WithMinReplicasAck(1, 5*time.Second)), serverKeys(t, rdb))
	locktest.Run(t, h)
}

// With min_replicas_ack = 1: a claim acknowledged by the replica is on the
// replica when Claim returns; with the replica stalled (SIGSTOP) WAIT times
// out, and the claim fails closed — an error wrapping ErrNotReplicated, the
// slot released again (watchers woken) with its attempt counted — while a
// complete marks the slot done on the master and says it was not
// acknowledged.
func TestMinReplicasAck(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	replica := redistest.StartReplica(t, srv)
	rdb := srv.Client()
	rep := replica.Client()
	const wait = 300 * time.Millisecond
	r, now := subscribed(t, rdb, redislock.WithMinReplicasAck(1, wait))
	ctx := context.Background()
	slot := func(task string) lock.Slot {
		return lock.Slot{Task: task, ID: "1", Time: now.Add(-time.Second), Deadline: now.Add(time.Hour)}
	}

	// Acknowledged: the replica holds the claim as soon as Claim returns.
	acked := slot("acked")
	c, err := r.Claim(ctx, acked, "a", policy)
	if err != nil || c.Result != lock.Won {
		t.Fatalf("claim with a live replica = %v, %v; want won", c.Result, err)
	}
	state, _ := redislock.Keys("slotd", acked)
	if v, err := rep.Get(ctx, state).Result(); err != nil || v != "run:a:1" {
		t.Fatalf("replica's copy of the claim right after Claim = %q, %v; want run:a:1", v, err)
	}

	// A claim held by a peer does not wait (nothing was written).
	replica.Signal(syscall.SIGSTOP)
	t.Cleanup(func() { replica.Signal(syscall.SIGCONT) })
	if c, err := r.Claim(ctx, acked, "b", policy); err != nil || c.Result != lock.Held {
		t.Fatalf("claim of a held slot with the replica stalled = %v, %v; want held", c.Result, err)
	}

	// Not acknowledged: fail closed.
	unacked := slot("unacked")
	w := r.Watch(unacked)
	defer w.Stop()
	start := time.Now()
	c, err = r.Claim(ctx, unacked, "a", policy)
	took := time.Since(start)
	if !errors.Is(err, redislock.ErrNotReplicated) || c.Result != 0 {
		t.Fatalf("claim with the replica stalled = %+v, %v; want ErrNotReplicated", c, err)
	}
	if took < wait {
		t.Errorf("claim returned after %v, before the %v WAIT could time out", took, wait)
	}
	t.Logf("unacknowledged claim: %v (after %v)", err, took)
	st, err := lock.ReadState(ctx, r, unacked)
	if err != nil || st.Status != "free" || st.Attempts != 1 {
		t.Fatalf("state after an unacknowledged claim = %+v, %v; want free with 1 attempt counted", st, err)
	}
	select {
	case <-w.C():
	case <-time.After(10 * time.Second):
		t.Fatal("the release of an unacknowledged claim did not wake the slot's watcher")
	}

	// Complete: the done marker is written; the error says it is not
	// acknowledged.
	done := slot("done")
	replica.Signal(syscall.SIGCONT)
	c, err = r.Claim(ctx, done, "a", policy)
	if err != nil || c.Result != lock.Won {
		t.Fatalf("claim after SIGCONT = %v, %v; want won", c.Result, err)
	}
	replica.Signal(syscall.SIGSTOP)
	err = r.Complete(ctx, done, lock.Owner{ID: "a", Attempt: c.Attempt}, policy.DoneTTL)
	if !errors.Is(err, redislock.ErrNotReplicated) {
		t.Fatalf("complete with the replica stalled: %v, want ErrNotReplicated", err)
	}
	if st, err := lock.ReadState(ctx, r, done); err != nil || st.Status != "done" || st.Holder != "a" {
		t.Fatalf("state after an unacknowledged complete = %+v, %v; want done by a", st, err)
	}
	// A lease retrying the complete would only wait again: it stops at once.
	replica.Signal(syscall.SIGCONT)
}

// WithMinReplicasAck on a Cluster pins the connection to the master that
// owns the slot: on masters without replicas every won claim fails closed,
// on every shard, and is released; with n = 0 (no WAIT) nothing changes.
func TestMinReplicasAckCluster(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 3)
	rdb := c.Client()
	r := redislock.New(rdb, "slotd", redislock.WithMinReplicasAck(1, 100*time.Millisecond))
	t.Cleanup(func() { r.Close() })
	ctx := context.Background()
	now, err := r.Time(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var masters []string
	for i := 0; len(masters) < 3; i++ {
		if i > 200 {
			t.Fatalf("200 slots hashed to only %d masters", len(masters))
		}
		slot := lock.Slot{Task: "ack-" + strings.Repeat("y", i), ID: "1", Time: now.Add(-time.Second), Deadline: now.Add(time.Hour)}
		state, _ := redislock.Keys("slotd", slot)
		node, err := rdb.MasterForKey(ctx, state)
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(masters, node.Options().Addr) {
			continue
		}
		masters = append(masters, node.Options().Addr)
		if _, err := r.Claim(ctx, slot, "a", policy); !errors.Is(err, redislock.ErrNotReplicated) {
			t.Fatalf("claim on master %s without replicas: %v, want ErrNotReplicated", node.Options().Addr, err)
		}
		if st, err := lock.ReadState(ctx, r, slot); err != nil || st.Status != "free" || st.Attempts != 1 {
			t.Fatalf("state on master %s = %+v, %v; want free, 1 attempt", node.Options().Addr, st, err)
		}
	}
}

// The server's min-replicas-to-write, set beside min_replicas_ack, refuses
// the claim script at its first write when the master has too few
// replicas: the claim fails before its attempt is counted, so a master
// left without replicas does not burn the slot's attempts.
func TestMinReplicasToWriteRefusesBeforeCounting(t *testing.T) {
	srv := redistest.Start(t, "--min-replicas-to-write", "1")
	rdb := srv.Client()
	r := redislock.New(rdb, "slotd", redislock.WithMinReplicasAck(1, 100*time.Millisecond))
	t.Cleanup(func() { r.Close() })
	ctx := context.Background()
	now, err := r.Time(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slot := lock.Slot{Task: "norep", ID: "1", Time: now.Add(-time.Second), Deadline: now.Add(time.Hour)}
	for range 3 {
		_, err := r.Claim(ctx, slot, "a", policy)
		if err == nil || !strings.Contains(err.Error(), "NOREPLICAS") {
			t.Fatalf("claim on a master below min-replicas-to-write: %v, want NOREPLICAS", err)
		}
	}
	if st, err := lock.ReadState(ctx, r, slot); err != nil || st.Status != "free" || st.Attempts != 0 {
		t.Fatalf("state = %+v, %v; want free with no attempt counted", st, err)
	}
}

// The conformance suite through a Sentinel failover client.
func TestConformanceSentinel(t *testing.T) {
	t.Parallel()
	s := redistest.StartSentinel(t)
	rdb := s.Client()
	h := clientHarness(t, rdb, redislock.New(rdb, "slotd"), serverKeys(t, rdb))
	locktest.Run(t, h)
}

// After the master is killed and Sentinel promotes the replica, the same
// store claims on the new master, and its release subscription, which
// go-redis re-establishes on the new master, wakes watchers again.
func TestSentinelStoreFollowsFailover(t *testing.T) {
	s := redistest.StartSentinel(t)
	rdb := s.Client()
	r, now := subscribed(t, rdb)
	ctx := context.Background()
	before := lock.Slot{Task: "before", ID: "1", Time: now.Add(-time.Second), Deadline: now.Add(time.Hour)}
	if c, err := r.Claim(ctx, before, "a", policy); err != nil || c.Result != lock.Won {
		t.Fatalf("claim before the failover = %v, %v", c.Result, err)
	}
	killed := time.Now()
	s.Master.Stop()
	s.AwaitMaster(s.Replica.Addr, 90*time.Second)
	t.Logf("replica promoted %v after the kill", time.Since(killed))

	slot := lock.Slot{Task: "after", ID: "1", Time: now.Add(-time.Second), Deadline: now.Add(time.Hour)}
	w := r.Watch(slot)
	defer w.Stop()
	var (
		c   lock.Claim
		err error
	)
	deadline := time.Now().Add(60 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		c, err = r.Claim(cctx, slot, "b", policy)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no claim answered within 60s of the promotion: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if c.Result != lock.Won {
		t.Fatalf("claim on the new master = %v", c.Result)
	}
	direct := s.Replica.Client()
	if n, err := direct.Exists(ctx, "slotd:{after:1}").Result(); err != nil || n != 1 {
		t.Fatalf("the new master %s does not hold the claim (%d, %v)", s.Replica.Addr, n, err)
	}
	// The subscription comes back on its own; a release wakes the watcher.
	// Releases before it is back are lost (promptness only), so claim and
	// release again until one wakes it.
	woke := false
	for i := 0; !woke && time.Now().Before(deadline); i++ {
		if i > 0 {
			if c, err = r.Claim(ctx, slot, "b", lock.Policy{Lease: policy.Lease, DoneTTL: policy.DoneTTL, MaxAttempts: 900}); err != nil || c.Result != lock.Won {
				t.Fatalf("claim again = %v, %v", c.Result, err)
			}
		}
		if err := r.Release(ctx, slot, lock.Owner{ID: "b", Attempt: c.Attempt}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-w.C():
			woke = true
			t.Logf("watcher woken by release %d after the failover", i+1)
		case <-time.After(time.Second):
		}
	}
	if !woke {
		t.Fatal("no release woke the watcher within 60s of the promotion")
	}
}

// A batch of many tasks' history appends spans hash slots on a Redis
// Cluster; each append is one key's command, so they all land (a MULTI
// across slots failed every append there with CROSSSLOT), every stream
// gets its TTL, and they read back pipelined across shards. After the
// masters lose their script cache, a stream's first append loads the
// script again.
func TestClusterHistoryAppendsAcrossShards(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 3)
	rdb := c.Client()
	ctx := context.Background()
	h := redislock.NewHistory(rdb, "slotd", time.Hour)
	defer h.Close()
	const tasks = 60
	names := make([]string, tasks)
	for i := range names {
		names[i] = "report-" + strings.Repeat("x", i%5) + string(rune('a'+i%26)) + strings.Repeat("y", i/26)
	}
	appendAll := func(k int) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make(chan error, tasks)
		for _, task := range names {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- h.Append(ctx, task, entry(task, k, "success", ""))
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Errorf("append %d: %v", k, err)
			}
		}
	}
	appendAll(1)
	appendAll(2)
	masters := map[string]bool{}
	for _, task := range names {
		key := redislock.HistoryKey("slotd", task)
		if ttl := rdb.PTTL(ctx, key).Val(); ttl <= 0 {
			t.Errorf("%s has no TTL (%v)", key, ttl)
		}
		node, err := rdb.MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		masters[node.Options().Addr] = true
	}
	if len(masters) < 2 {
		t.Fatalf("the %d tasks' streams all hashed to %d master(s): the cluster was not exercised", tasks, len(masters))
	}
	got, errs := h.RecentEach(ctx, names, slices.Repeat([]int{5}, tasks))
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for i, es := range got {
		if len(es) != 2 || es[0].Attempt != 2 {
			t.Errorf("%s: %d entries read back (newest attempt %v), want 2, newest attempt 2", names[i], len(es), es)
		}
	}

	if err := rdb.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		return node.ScriptFlush(ctx).Err()
	}); err != nil {
		t.Fatal(err)
	}
	if err := h.Append(ctx, "fresh", entry("fresh", 1, "success", "")); err != nil {
		t.Fatalf("a stream's first append after SCRIPT FLUSH: %v", err)
	}
	if ttl := rdb.PTTL(ctx, redislock.HistoryKey("slotd", "fresh")).Val(); ttl <= 0 {
		t.Errorf("the stream made after SCRIPT FLUSH has no TTL (%v)", ttl)
	}
}

// With min_replicas_ack every replica claims each slot (no preferred
// claimant), and those that lost the race settle on a done notice, which
// complete.lua no longer sends: the acknowledged completion sends it. A
// peer's watch hears Completed; without the ack, it would hear nothing.
func TestMinReplicasAckCompletionNotice(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	redistest.StartReplica(t, srv)
	rdb := srv.Client()
	for _, acked := range []bool{true, false} {
		var opts []redislock.Option
		if acked {
			opts = append(opts, redislock.WithMinReplicasAck(1, 5*time.Second))
		}
		r, now := subscribed(t, rdb, opts...)
		peer, _ := subscribed(t, rdb)
		ctx := context.Background()
		slot := lock.Slot{Task: fmt.Sprintf("acked-%v", acked), ID: "1", Time: now.Add(-time.Second), Deadline: now.Add(time.Hour)}
		w := peer.Watch(slot)
		notices := make(chan lock.Change, 4)
		w.OnChange(func(c lock.Change) { notices <- c })
		c, err := r.Claim(ctx, slot, "a", policy)
		if err != nil || c.Result != lock.Won {
			t.Fatalf("claim = %v, %v; want won", c.Result, err)
		}
		if err := r.Complete(ctx, slot, lock.Owner{ID: "a", Attempt: c.Attempt}, time.Hour); err != nil {
			t.Fatal(err)
		}
		// A release of another watched slot, after the completion, is the
		// notice awaited: a done notice would be queued ahead of it.
		after := slot
		after.ID = "2"
		w2 := peer.Watch(after)
		c2, err := r.Claim(ctx, after, "a", policy)
		if err != nil || c2.Result != lock.Won {
			t.Fatalf("claim = %v, %v; want won", c2.Result, err)
		}
		if err := r.Release(ctx, after, lock.Owner{ID: "a", Attempt: c2.Attempt}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-w2.C():
		case <-time.After(10 * time.Second):
			t.Fatal("release not heard")
		}
		w2.Stop()
		w.Stop()
		var got []lock.Change
		for len(notices) > 0 {
			got = append(got, <-notices)
		}
		if want := map[bool][]lock.Change{true: {lock.Completed}, false: nil}[acked]; !slices.Equal(got, want) {
			t.Errorf("acked %v: the peer heard %v, want %v", acked, got, want)
		}
	}
}
