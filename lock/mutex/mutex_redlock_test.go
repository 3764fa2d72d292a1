package mutex

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/lock"
)

// Redlock over five independent redis-servers: what a minority and a
// majority of failed nodes cost.

func fiveServers(t *testing.T) ([]*redistest.Server, []Client) {
	var srvs []*redistest.Server
	var clients []Client
	for range 5 {
		s := redistest.Start(t)
		srvs = append(srvs, s)
		clients = append(clients, s.Client())
	}
	return srvs, clients
}

func redlocker(t *testing.T, nodes []Client, opts ...LockerOption) *Locker {
	l, err := NewRedlockLocker(nodes, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func TestRedlockMutexSurvivesTwoOfFiveDown(t *testing.T) {
	srvs, nodes := fiveServers(t)
	ctx := context.Background()
	a, b := redlocker(t, nodes), redlocker(t, nodes)
	srvs[0].Stop()
	srvs[3].Stop()
	m, err := a.TryLock(ctx, "report", WithTTL(2*time.Second))
	if err != nil {
		t.Fatalf("3 of 5 nodes up: %v", err)
	}
	if _, err := b.TryLock(ctx, "report"); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("a second owner with 3 of 5 up: %v, want ErrNotObtained", err)
	}
	// The watchdog keeps the lock on the three: several renewals go by.
	first := m.h.ValidUntil()
	eventually(t, 20*time.Second, "renewals on 3 of 5 nodes", func() bool { return m.h.ValidUntil().After(first.Add(time.Second)) })
	if err := m.Context().Err(); err != nil {
		t.Fatalf("lease lost with 3 of 5 nodes up: %v", context.Cause(m.Context()))
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	m2, err := b.Lock(ctx, "report", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	_ = m2.Unlock(ctx)
}

func TestRedlockMutexThreeOfFiveDown(t *testing.T) {
	srvs, nodes := fiveServers(t)
	ctx := context.Background()
	l := redlocker(t, nodes)
	m, err := l.TryLock(ctx, "report", WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 2, 4} {
		srvs[i].Stop()
	}
	// No quorum renews the lease: the holder must stop.
	select {
	case <-m.Context().Done():
	case <-time.After(30 * time.Second):
		t.Fatal("lease not lost within 30s with 3 of 5 nodes down")
	}
	if cause := context.Cause(m.Context()); !errors.Is(cause, lock.ErrLeaseLost) {
		t.Fatalf("cause %v, want ErrLeaseLost", cause)
	}
	if _, err := l.TryLock(ctx, "other"); err == nil {
		t.Fatal("a lock was granted by 2 of 5 nodes")
	}
	for _, i := range []int{0, 2, 4} {
		srvs[i].Restart()
	}
	// Restarted empty, the nodes grant again once m's keys on the other
	// two have expired (the restart rule: a node that lost its data must
	// stay down for a ttl).
	var got *Mutex
	eventually(t, 30*time.Second, "the lock granted again after recovery", func() bool {
		got, err = l.TryLock(ctx, "report")
		return err == nil
	})
	_ = got.Unlock(ctx)
}

// flaky is a node that can be cut off: the thin fault injector the
// fencing test needs to pick which nodes a quorum is made of.
type flaky struct {
	*redis.Client
	down  atomic.Bool
	delay atomic.Int64 // ns added before each script call
}

func (f *flaky) wait(ctx context.Context) {
	if d := time.Duration(f.delay.Load()); d > 0 {
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
}

var errCut = errors.New("injected: node unreachable")

func (f *flaky) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	f.wait(ctx)
	if f.down.Load() {
		c := redis.NewCmd(ctx)
		c.SetErr(errCut)
		return c
	}
	return f.Client.EvalSha(ctx, sha, keys, args...)
}

func (f *flaky) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	f.wait(ctx)
	if f.down.Load() {
		c := redis.NewCmd(ctx)
		c.SetErr(errCut)
		return c
	}
	return f.Client.Eval(ctx, script, keys, args...)
}

// Two quorums that share one node: the second's token must exceed the
// first's even when the first's came from a node the second cannot reach
// and whose counter ran far ahead. The fence round after each acquisition
// is what carries it over.
func TestRedlockMutexFencingAcrossQuorums(t *testing.T) {
	srvs, _ := fiveServers(t)
	ctx := context.Background()
	var fs []*flaky
	var nodes []Client
	for _, s := range srvs {
		f := &flaky{Client: s.Client()}
		fs = append(fs, f)
		nodes = append(nodes, f)
	}
	l := redlocker(t, nodes)
	fence := fenceKey(lockKey("slotd", "report"))
	// Node 0's counter is far ahead of the others.
	if err := fs[0].Set(ctx, fence, 8_000_000_000_000_000, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	fs[3].down.Store(true)
	fs[4].down.Store(true)
	m1, err := l.TryLock(ctx, "report") // quorum {0, 1, 2}
	if err != nil {
		t.Fatal(err)
	}
	if err := m1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	fs[0].down.Store(true)
	fs[1].down.Store(true)
	fs[3].down.Store(false)
	fs[4].down.Store(false)
	m2, err := l.TryLock(ctx, "report") // quorum {2, 3, 4}: shares node 2
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Unlock(ctx)
	if m2.Token() <= m1.Token() {
		t.Fatalf("token %d on quorum {2,3,4} after %d on {0,1,2}", m2.Token(), m1.Token())
	}
	for i, f := range fs {
		if ttl := f.Client.PTTL(ctx, fence).Val(); ttl <= 0 {
			t.Fatalf("node %d: fence key TTL %v", i, ttl)
		}
	}
}

// A grant whose reply comes after the lock's validity is not a win: TryLock
// says ErrNotObtained and undoes the grant, so nobody holds a lock that its
// holder believes is free.
func TestMutexLateGrantIsNotAWin(t *testing.T) {
	srv := redistest.Start(t)
	f := &flaky{Client: srv.Client()}
	l := NewLocker(f, WithNodeTimeout(10*time.Second))
	t.Cleanup(func() { l.Close() })
	ctx := context.Background()
	f.delay.Store(int64(300 * time.Millisecond)) // > ttl − ttl/10
	_, err := l.TryLock(ctx, "late", WithTTL(200*time.Millisecond))
	if !errors.Is(err, ErrNotObtained) || !strings.Contains(err.Error(), "validity") {
		t.Fatalf("late grant: %v, want ErrNotObtained (after its validity)", err)
	}
	f.delay.Store(0)
	if n := f.Client.Exists(ctx, lockKey("slotd", "late")).Val(); n != 0 {
		t.Fatalf("the late grant was not undone")
	}
	m, err := l.TryLock(ctx, "late")
	if err != nil {
		t.Fatalf("after a late grant the lock is not free: %v", err)
	}
	_ = m.Unlock(ctx)
}
