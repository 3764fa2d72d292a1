package mutex

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/internal/quorum"
)

// The Mutex conformance suite: the same cases against one redis-server, a
// 3-master Redis Cluster and a Redlock quorum of 3 independent servers.
// Every case takes fresh lock names, and awaits events rather than sleeping.
// It is an internal test so that it can ask the Locker why a waiter woke and
// try renew and release under a foreign owner id.

var mutexSeq atomic.Int64

func lockName(t *testing.T) string {
	return fmt.Sprintf("%s-%d", strings.ReplaceAll(t.Name(), "/", "."), mutexSeq.Add(1))
}

// lockEnv is one deployment under the suite, with the means to look under it.
type lockEnv struct {
	// locker returns a new Locker on the deployment: another process.
	locker func(t *testing.T, opts ...LockerOption) *Locker
	// nodes are the independent stores (one but for Redlock), to look at keys.
	nodes []redis.UniversalClient
	// quorum is how many nodes must lose a key for its lock to be lost.
	quorum int
}

func (e lockEnv) newLocker(t *testing.T, opts ...LockerOption) *Locker {
	l := e.locker(t, opts...)
	t.Cleanup(func() { l.Close() })
	return l
}

// hashes reads the lock hash on every node.
func (e lockEnv) hashes(t *testing.T, name string) []map[string]string {
	t.Helper()
	var out []map[string]string
	for _, n := range e.nodes {
		h, err := n.HGetAll(context.Background(), lockKey("slotd", name)).Result()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, h)
	}
	return out
}

// countOn reads the lock's count on every node ("" where the key is absent).
func (e lockEnv) counts(t *testing.T, name string) []string {
	var out []string
	for _, h := range e.hashes(t, name) {
		out = append(out, h["count"])
	}
	return out
}

// ttls lists every key of every node with its TTL.
func (e lockEnv) ttls(t *testing.T) map[string]time.Duration {
	t.Helper()
	ctx := context.Background()
	out := map[string]time.Duration{}
	read := func(c redis.Cmdable, node int) error {
		keys, err := c.Keys(ctx, "*").Result()
		for _, k := range keys {
			out[fmt.Sprintf("node%d %s", node, k)] = c.PTTL(ctx, k).Val()
		}
		return err
	}
	for i, n := range e.nodes {
		var err error
		if cc, ok := n.(*redis.ClusterClient); ok {
			var mu sync.Mutex
			err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
				mu.Lock()
				defer mu.Unlock()
				return read(c, i)
			})
		} else {
			err = read(n, i)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// lose deletes the lock's key on a quorum of nodes, as an expiry would.
func (e lockEnv) lose(t *testing.T, name string) {
	t.Helper()
	for _, n := range e.nodes[:e.quorum] {
		if err := n.Del(context.Background(), lockKey("slotd", name)).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

func singleEnv(t *testing.T) lockEnv {
	rdb := redistest.Start(t).Client()
	return lockEnv{
		locker: func(t *testing.T, opts ...LockerOption) *Locker { return NewLocker(rdb, opts...) },
		nodes:  []redis.UniversalClient{rdb},
		quorum: 1,
	}
}

func redlockEnv(t *testing.T, n int) lockEnv {
	var nodes []redis.UniversalClient
	var clients []Client
	for range n {
		c := redistest.Start(t).Client()
		nodes = append(nodes, c)
		clients = append(clients, c)
	}
	return lockEnv{
		locker: func(t *testing.T, opts ...LockerOption) *Locker {
			l, err := NewRedlockLocker(clients, opts...)
			if err != nil {
				t.Fatal(err)
			}
			return l
		},
		nodes:  nodes,
		quorum: quorum.Of(n),
	}
}

// sentinelEnv starts a master, a replica and three Sentinels, and locks
// through go-redis's failover client, as slotd does in Sentinel mode.
func sentinelEnv(t *testing.T) lockEnv {
	rdb := redistest.StartSentinel(t).Client()
	return lockEnv{
		locker: func(t *testing.T, opts ...LockerOption) *Locker { return NewLocker(rdb, opts...) },
		nodes:  []redis.UniversalClient{rdb},
		quorum: 1,
	}
}

// clusterEnv starts a Redis Cluster of three masters on loopback.
func clusterEnv(t *testing.T) lockEnv {
	cc := redistest.StartCluster(t, 3).Client()
	return lockEnv{
		locker: func(t *testing.T, opts ...LockerOption) *Locker { return NewLocker(cc, opts...) },
		nodes:  []redis.UniversalClient{cc},
		quorum: 1,
	}
}

// TestMutexConformance runs every case on every deployment.
func TestMutexConformance(t *testing.T) {
	envs := []struct {
		name string
		make func(*testing.T) lockEnv
	}{
		{"single", singleEnv},
		{"cluster", clusterEnv},
		{"sentinel", sentinelEnv},
		{"redlock3", func(t *testing.T) lockEnv { return redlockEnv(t, 3) }},
	}
	cases := []struct {
		name string
		run  func(*testing.T, lockEnv)
	}{
		{"ExclusionAndFencingUnder16Goroutines", testExclusion},
		{"Reentrancy", testReentrancy},
		{"WrongOwnerCannotUnlockOrRenew", testWrongOwner},
		{"TTLOnEveryKey", testTTLs},
		{"LockWakesOnReleaseByMessage", testWake},
		{"LeaseLostCancelsContext", testLeaseLost},
		{"TokensGrowAfterFenceCounterExpires", testFenceExpiry},
		{"Do", testDo},
		{"Validation", testValidation},
	}
	for _, e := range envs {
		t.Run(e.name, func(t *testing.T) {
			env := e.make(t)
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) { c.run(t, env) })
			}
		})
	}
}

// 16 goroutines on 4 Lockers (processes) take one lock 5 times each: never
// two inside at once, and every acquisition's token is greater than the one
// before it.
func testExclusion(t *testing.T, e lockEnv) {
	ctx := context.Background()
	name := lockName(t)
	lockers := make([]*Locker, 4)
	for i := range lockers {
		lockers[i] = e.newLocker(t)
	}
	var (
		inside atomic.Int32
		mu     sync.Mutex
		tokens []int64
		wg     sync.WaitGroup
	)
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := lockers[g%len(lockers)]
			for range 5 {
				m, err := l.Lock(ctx, name, 2*time.Minute, WithTTL(10*time.Second))
				if err != nil {
					t.Error(err)
					return
				}
				if n := inside.Add(1); n != 1 {
					t.Errorf("%d holders inside at once", n)
				}
				mu.Lock()
				tokens = append(tokens, m.Token())
				mu.Unlock()
				inside.Add(-1)
				if err := m.Unlock(ctx); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if len(tokens) != 80 {
		t.Fatalf("%d acquisitions, want 80", len(tokens))
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("token %d = %d after %d: not increasing", i, tokens[i], tokens[i-1])
		}
	}
}

// An owner takes the lock three times (through WithOwner and through the
// Mutex's own context): one hold, one token, count 3; the third Unlock frees
// it, not the first two.
func testReentrancy(t *testing.T, e lockEnv) {
	ctx := WithOwner(context.Background(), "owner-a")
	name := lockName(t)
	l, other := e.newLocker(t), e.newLocker(t)
	m1, err := l.TryLock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	m2, err := l.TryLock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	m3, err := l.Lock(m2.Context(), name, time.Second) // the Mutex's context carries the owner
	if err != nil {
		t.Fatal(err)
	}
	if m1.Token() != m2.Token() || m2.Token() != m3.Token() {
		t.Fatalf("a reentry drew a new token: %d %d %d", m1.Token(), m2.Token(), m3.Token())
	}
	if m3.Owner() != "owner-a" {
		t.Fatalf("owner %q, want owner-a", m3.Owner())
	}
	for _, c := range e.counts(t, name) {
		if c != "3" {
			t.Fatalf("counts %v, want 3 on every node", e.counts(t, name))
		}
	}
	// Another Locker with the same owner id reenters too: the owner, not the
	// process, is what reentrancy follows.
	m4, err := other.TryLock(ctx, name)
	if err != nil {
		t.Fatalf("same owner on another Locker: %v", err)
	}
	if err := m4.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for i, m := range []*Mutex{m3, m1} {
		if err := m.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := other.TryLock(context.Background(), name); !errors.Is(err, ErrNotObtained) {
			t.Fatalf("after %d of 3 unlocks another owner got %v, want ErrNotObtained", i+1, err)
		}
		if m.Context().Err() == nil {
			t.Fatal("an unlocked Mutex's context is not done")
		}
	}
	if m2.Context().Err() != nil {
		t.Fatalf("m2's context done while m2 holds: %v", context.Cause(m2.Context()))
	}
	if err := m2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	m, err := other.TryLock(context.Background(), name)
	if err != nil {
		t.Fatalf("after the last unlock another owner got %v", err)
	}
	if m.Token() <= m1.Token() {
		t.Fatalf("next holder's token %d not above %d", m.Token(), m1.Token())
	}
	_ = m.Unlock(ctx)
}

// A holder's lock cannot be renewed or released under another owner id, and
// a Mutex whose lock was taken over cannot unlock its successor.
func testWrongOwner(t *testing.T, e lockEnv) {
	ctx := context.Background()
	name := lockName(t)
	l := e.newLocker(t)
	m, err := l.TryLock(ctx, name, WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.renew(ctx, name, "intruder", time.Hour); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("renew by another owner: %v, want ErrNotHeld", err)
	}
	if _, err := l.release(ctx, name, "intruder", time.Minute); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("release by another owner: %v, want ErrNotHeld", err)
	}
	for i, h := range e.hashes(t, name) {
		if h["owner"] != m.Owner() || h["count"] != "1" {
			t.Fatalf("node %d: hash %v after the intruder, want owner %s count 1", i, h, m.Owner())
		}
	}
	for _, n := range e.nodes {
		if ttl := n.PTTL(ctx, lockKey("slotd", name)).Val(); ttl > time.Minute {
			t.Fatalf("the intruder's renew extended the lock to %v", ttl)
		}
	}
	// The lock expires under m and a successor takes it: m's Unlock must not
	// free the successor's lock.
	m.h.Stop() // no more renewals, as if m's process were paused
	e.lose(t, name)
	succ, err := e.newLocker(t).TryLock(ctx, name, WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Unlock(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("stale Unlock: %v, want ErrNotHeld", err)
	}
	held := 0
	for _, h := range e.hashes(t, name) {
		if h["owner"] == succ.Owner() && h["count"] == "1" {
			held++
		}
	}
	if held < e.quorum {
		t.Fatalf("after the stale unlock the successor holds %d nodes, want a quorum of %d: %v", held, e.quorum, e.hashes(t, name))
	}
	_ = succ.Unlock(ctx)
}

// Every key the lock writes has a TTL, through acquisition, reentry,
// renewals and release; the fence counter lives for the fence TTL.
func testTTLs(t *testing.T, e lockEnv) {
	ctx := WithOwner(context.Background(), "ttl-owner")
	name := lockName(t)
	l := e.newLocker(t, WithFenceTTL(time.Hour))
	check := func(when string) {
		t.Helper()
		keys := e.ttls(t)
		n := 0
		for k, ttl := range keys {
			if !strings.Contains(k, "{"+name+"}") {
				continue
			}
			n++
			if ttl <= 0 {
				t.Fatalf("%s: key %s has no TTL (%v)", when, k, ttl)
			}
			if strings.HasSuffix(k, ":fence") && ttl < 50*time.Minute {
				t.Fatalf("%s: fence key %s TTL %v, want the fence TTL (1h)", when, k, ttl)
			}
		}
		if n == 0 {
			t.Fatalf("%s: no key of lock %s", when, name)
		}
	}
	m, err := l.TryLock(ctx, name, WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	check("held")
	m2, err := l.TryLock(ctx, name, WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	check("reentered")
	// Let the watchdog renew a few times (every 100ms).
	first := m.h.ValidUntil()
	eventually(t, 10*time.Second, "two renewals", func() bool { return m.h.ValidUntil().After(first.Add(150 * time.Millisecond)) })
	check("renewed")
	_ = m2.Unlock(ctx)
	_ = m.Unlock(ctx)
	check("released")
}

// A waiter sleeps on a lock held with a 1h ttl and is woken by the holder's
// unlock: its timer, the holder's remaining ttl, could not have woken it.
func testWake(t *testing.T, e lockEnv) {
	ctx := context.Background()
	name := lockName(t)
	holder := e.newLocker(t)
	m, err := holder.TryLock(ctx, name, WithTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	waiter := e.locker(t) // hooks set before any goroutine reads them
	t.Cleanup(func() { waiter.Close() })
	waiting := make(chan struct{}, 1)
	var byTimer, byMessage atomic.Int32
	waiter.waiting = func(string) {
		select {
		case waiting <- struct{}{}:
		default:
		}
	}
	waiter.woken = func(_ string, msg bool) {
		if msg {
			byMessage.Add(1)
		} else {
			byTimer.Add(1)
		}
	}
	type res struct {
		m   *Mutex
		err error
	}
	got := make(chan res, 1)
	go func() {
		m, err := waiter.Lock(ctx, name, 2*time.Minute)
		got <- res{m, err}
	}()
	select {
	case <-waiting:
	case r := <-got:
		t.Fatalf("Lock returned before waiting: %v", r.err)
	case <-time.After(time.Minute):
		t.Fatal("the waiter never went to sleep")
	}
	start := time.Now()
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	var r res
	select {
	case r = <-got:
	case <-time.After(time.Minute):
		t.Fatal("the waiter did not wake within a minute of the unlock")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.m.Unlock(ctx)
	if byMessage.Load() < 1 || byTimer.Load() != 0 {
		t.Fatalf("woken %d times by message, %d by timer; want by the message only", byMessage.Load(), byTimer.Load())
	}
	t.Logf("woken %v after the unlock", time.Since(start))
}

// Deleting the key (on a quorum) makes the watchdog's next renewal fail:
// the Mutex's context is cancelled with ErrLeaseLost, and Unlock says so.
func testLeaseLost(t *testing.T, e lockEnv) {
	ctx := context.Background()
	name := lockName(t)
	l := e.newLocker(t)
	m, err := l.TryLock(ctx, name, WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	e.lose(t, name)
	select {
	case <-m.Context().Done():
	case <-time.After(30 * time.Second):
		t.Fatal("context not cancelled within 30s of the key's loss")
	}
	if cause := context.Cause(m.Context()); !errors.Is(cause, lock.ErrLeaseLost) || !errors.Is(cause, lock.ErrNotHeld) {
		t.Fatalf("cause %v, want ErrLeaseLost (not held)", cause)
	}
	if err := m.Unlock(ctx); !errors.Is(err, lock.ErrLeaseLost) {
		t.Fatalf("Unlock after loss: %v, want ErrLeaseLost", err)
	}
	// The name is free for the next holder, on this Locker too.
	m2, err := l.TryLock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if m2.Token() <= m.Token() {
		t.Fatalf("token %d after %d", m2.Token(), m.Token())
	}
	_ = m2.Unlock(ctx)
}

// The fence counter is deleted, as an expiry after the fence TTL would: the
// next token is still greater (a new counter starts at the server's clock).
func testFenceExpiry(t *testing.T, e lockEnv) {
	ctx := context.Background()
	name := lockName(t)
	l := e.newLocker(t)
	var last int64
	for i := range 6 {
		if i == 3 {
			for _, n := range e.nodes {
				if err := n.Del(ctx, fenceKey(lockKey("slotd", name))).Err(); err != nil {
					t.Fatal(err)
				}
			}
		}
		m, err := l.TryLock(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if m.Token() <= last {
			t.Fatalf("acquisition %d: token %d after %d", i, m.Token(), last)
		}
		last = m.Token()
		if err := m.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func testDo(t *testing.T, e lockEnv) {
	ctx := context.Background()
	l := e.newLocker(t)
	free := func(name string) bool {
		for _, h := range e.hashes(t, name) {
			if len(h) != 0 {
				return false
			}
		}
		return true
	}
	t.Run("RunsUnderTheLockAndReleases", func(t *testing.T) {
		name := lockName(t)
		ran := false
		err := l.Do(ctx, name, func(ctx context.Context) error {
			ran = true
			if _, err := l.TryLock(context.Background(), name); !errors.Is(err, ErrNotObtained) {
				return fmt.Errorf("inside Do another owner got %v", err)
			}
			if _, ok := OwnerFrom(ctx); !ok {
				return errors.New("fn's context carries no owner")
			}
			if m, ok := MutexFrom(ctx); !ok || m.Name() != name || m.Token() <= 0 {
				return fmt.Errorf("fn's context carries no Mutex of %q: %v", name, m)
			}
			return nil
		})
		if err != nil || !ran {
			t.Fatalf("Do: %v, ran %v", err, ran)
		}
		if !free(name) {
			t.Fatal("lock still held after Do")
		}
	})
	t.Run("ReturnsFnsErrorAndReleases", func(t *testing.T) {
		name := lockName(t)
		boom := errors.New("boom")
		if err := l.Do(ctx, name, func(context.Context) error { return boom }); !errors.Is(err, boom) {
			t.Fatalf("Do: %v, want boom", err)
		}
		if !free(name) {
			t.Fatal("lock still held after a failed fn")
		}
	})
	t.Run("ReleasesOnPanic", func(t *testing.T) {
		name := lockName(t)
		func() {
			defer func() { _ = recover() }()
			_ = l.Do(ctx, name, func(context.Context) error { panic("fn panicked") })
		}()
		if !free(name) {
			t.Fatal("lock still held after fn panicked")
		}
	})
	t.Run("ReleasesWhenCtxIsCancelled", func(t *testing.T) {
		name := lockName(t)
		cctx, cancel := context.WithCancel(ctx)
		err := l.Do(cctx, name, func(ctx context.Context) error {
			cancel()
			<-ctx.Done()
			return ctx.Err()
		})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Do: %v, want Canceled", err)
		}
		if !free(name) {
			t.Fatal("lock still held: the release must not use the cancelled context")
		}
	})
	t.Run("NotObtainedDoesNotRun", func(t *testing.T) {
		name := lockName(t)
		m, err := l.TryLock(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Unlock(ctx)
		err = l.Do(ctx, name, func(context.Context) error { t.Error("fn ran"); return nil }, WithWait(20*time.Millisecond))
		if !errors.Is(err, ErrNotObtained) {
			t.Fatalf("Do on a held lock: %v, want ErrNotObtained", err)
		}
	})
	t.Run("LeaseLostCancelsFn", func(t *testing.T) {
		name := lockName(t)
		err := l.Do(ctx, name, func(ctx context.Context) error {
			e.lose(t, name)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(30 * time.Second):
				return errors.New("fn's context not cancelled within 30s of the loss")
			}
		}, WithTTL(time.Second))
		if !errors.Is(err, lock.ErrLeaseLost) || !errors.Is(err, context.Canceled) {
			t.Fatalf("Do: %v, want fn's Canceled joined with ErrLeaseLost", err)
		}
	})
}

func testValidation(t *testing.T, e lockEnv) {
	ctx := context.Background()
	l := e.newLocker(t)
	for _, c := range []struct {
		ctx  context.Context
		name string
		opts []MutexOption
		want string
	}{
		{ctx, "", nil, "empty lock name"},
		{ctx, "a{b}", nil, `"a{b}"`},
		{ctx, "short", []MutexOption{WithTTL(time.Millisecond)}, `"short": ttl 1ms`},
		{ctx, "neg", []MutexOption{WithWait(-time.Second)}, `"neg": negative wait`},
		{WithOwner(ctx, ""), "anon", nil, `"anon": empty owner`},
	} {
		err := l.Do(c.ctx, c.name, func(context.Context) error { return nil }, c.opts...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Do(%q): %v, want an error containing %s", c.name, err, c.want)
		}
	}
	if _, err := l.Lock(ctx, "x", -time.Second); err == nil || !strings.Contains(err.Error(), "negative wait") {
		t.Errorf("Lock with a negative wait: %v", err)
	}
	if _, err := NewRedlockLocker(nil); err == nil {
		t.Error("NewRedlockLocker(nil): no error")
	}
}

func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
