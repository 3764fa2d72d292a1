package lock

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

	"github.com/slotd/slotd/integration/redistest"
)

// The Mutex suite: every test takes a fresh lock name on a real
// redis-server, and awaits events rather than sleeping.

var mutexSeq atomic.Int64

func lockName(t *testing.T) string {
	return fmt.Sprintf("%s-%d", strings.ReplaceAll(t.Name(), "/", "."), mutexSeq.Add(1))
}

func newTestLocker(t *testing.T, rdb Client, opts ...LockerOption) *Locker {
	l := NewLocker(rdb, opts...)
	t.Cleanup(func() { l.Close() })
	return l
}

// eventually polls cond every 10ms until it holds or d passes.
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

func TestMutexTryLock(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	l := newTestLocker(t, rdb)
	ctx := context.Background()
	name := lockName(t)
	m, err := l.TryLock(ctx, name, WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryLock(ctx, name); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("second owner: err = %v, want ErrNotObtained", err)
	}
	got, err := rdb.HGetAll(ctx, LockKey("slotd", name)).Result()
	if err != nil || got["owner"] != m.Owner() || got["count"] != "1" || got["token"] != fmt.Sprint(m.Token()) {
		t.Fatalf("lock hash = %v, %v; want owner %s count 1 token %d", got, err, m.Owner(), m.Token())
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(ctx, LockKey("slotd", name)).Val(); n != 0 {
		t.Fatalf("lock key still there after Unlock")
	}
	if err := m.Unlock(ctx); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("second Unlock: err = %v, want ErrNotHeld", err)
	}
	if !errors.Is(context.Cause(m.Context()), context.Canceled) {
		t.Fatalf("context after Unlock: cause %v, want Canceled", context.Cause(m.Context()))
	}
}

var _ = sync.Mutex{}
var _ = redis.Nil
