package mutex_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/lock/mutex"
	"github.com/slotd/slotd/lock/redislock"
)

// The examples run against a real redis-server, started once for them and
// killed when the tests end. Examples cannot skip: without redis-server
// (and outside CI, where it is required) they are left out, as the tests
// that need a server skip.

var example struct {
	once sync.Once
	cmd  *exec.Cmd
	rdb  *redis.Client
	err  error
}

func TestMain(m *testing.M) {
	flag.Parse()
	if _, err := exec.LookPath("redis-server"); err != nil && os.Getenv("CI") != "true" {
		skip := "^Example(Locker|NewLocker)"
		if s := flag.Lookup("test.skip").Value.String(); s != "" {
			skip = s + "|" + skip
		}
		_ = flag.Set("test.skip", skip)
	}
	code := m.Run()
	if example.cmd != nil {
		_ = example.cmd.Process.Kill()
		_ = example.cmd.Wait()
	}
	os.Exit(code)
}

// exampleRedis is a client of the examples' redis-server.
func exampleRedis() *redis.Client {
	example.once.Do(func() {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			example.err = err
			return
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if example.err = cmd.Start(); example.err != nil {
			return
		}
		example.cmd = cmd
		example.rdb = redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(port), ContextTimeoutEnabled: true})
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if example.err = example.rdb.Ping(context.Background()).Err(); example.err == nil || time.Now().After(deadline) {
				return
			}
		}
	})
	if example.err != nil {
		panic(fmt.Sprintf("examples' redis-server: %v", example.err))
	}
	return example.rdb
}

func ExampleLocker_TryLock() {
	rdb := exampleRedis() // a *redis.Client, *redis.ClusterClient or failover client
	locker := mutex.NewLocker(rdb, mutex.WithPrefix("example"))
	defer locker.Close()
	ctx := mutex.WithOwner(context.Background(), "invoice-worker-1")

	m, err := locker.TryLock(ctx, "invoice:42", mutex.WithTTL(10*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	// Another owner is refused at once.
	_, err = locker.TryLock(context.Background(), "invoice:42")
	fmt.Println("other owner refused:", errors.Is(err, mutex.ErrNotObtained))

	// The same owner enters again (m.Context carries the owner): the same
	// hold, under the same fencing token.
	inner, err := locker.TryLock(m.Context(), "invoice:42")
	fmt.Println("reentered:", err == nil, inner.Token() == m.Token())
	_ = inner.Unlock(ctx) // taken twice, unlocked once: still held
	_, err = locker.TryLock(context.Background(), "invoice:42")
	fmt.Println("still held:", errors.Is(err, mutex.ErrNotObtained))

	_ = m.Unlock(ctx)
	next, err := locker.TryLock(context.Background(), "invoice:42")
	fmt.Println("next holder:", err == nil, "greater token:", next.Token() > m.Token())
	_ = next.Unlock(ctx)
	// Output:
	// other owner refused: true
	// reentered: true true
	// still held: true
	// next holder: true greater token: true
}

func ExampleLocker_Do() {
	locker := mutex.NewLocker(exampleRedis(), mutex.WithPrefix("example"))
	defer locker.Close()

	err := locker.Do(context.Background(), "nightly-export", func(ctx context.Context) error {
		// ctx is cancelled, with cause lock.ErrLeaseLost, if the watchdog
		// cannot keep the lock: stop writing then. Writes carry the hold's
		// fencing token, so a store can refuse a stale writer.
		m, _ := mutex.MutexFrom(ctx)
		fmt.Println("exporting under a token:", m.Token() > 0)
		return ctx.Err()
	}, mutex.WithWait(5*time.Second), mutex.WithTTL(15*time.Second))
	fmt.Println("err:", err)
	// Output:
	// exporting under a token: true
	// err: <nil>
}

// A waiter sleeps until the holder unlocks (pub/sub) or its remaining ttl
// passes, never polling.
func ExampleLocker_Lock() {
	locker := mutex.NewLocker(exampleRedis(), mutex.WithPrefix("example"))
	defer locker.Close()
	ctx := context.Background()

	m, err := locker.Lock(ctx, "ledger", 30*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer m.Unlock(ctx)
	// Pass the token along with every write, so the store can refuse a
	// writer whose lock has since passed to someone else.
	fmt.Println("writing under token", m.Token() > 0)
	// Output:
	// writing under token true
}

// Redlock: the same API over independent masters; a lock holds when a
// majority granted it within its validity.
func ExampleNewRedlockLocker() {
	var nodes []redislock.Client
	for _, addr := range []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"} {
		nodes = append(nodes, redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true}))
	}
	locker, err := mutex.NewRedlockLocker(nodes, mutex.WithNodeTimeout(50*time.Millisecond))
	if err != nil {
		panic(err)
	}
	defer locker.Close()
	_ = locker.Do(context.Background(), "rebalance", func(ctx context.Context) error { return nil })
}
