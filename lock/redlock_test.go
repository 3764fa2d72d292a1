package lock_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/integration/redistest"
	"github.com/slotd/slotd/lock"
)

// startNodes starts n independent redis-servers and returns them with a
// client of each.
func startNodes(t *testing.T, n int) ([]*redistest.Server, []*redis.Client) {
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
func newRedlock(t *testing.T, clients []*redis.Client, opts ...lock.RedlockOption) *lock.Redlock {
	nodes := make([]lock.Client, len(clients))
	for i, c := range clients {
		nodes[i] = c
	}
	r, err := lock.NewRedlock(nodes, "slotd", opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// redlockHarness is the conformance harness on five independent servers:
// time passes, values are planted and TTLs are read on every node.
func redlockHarness(t *testing.T) harness {
	ctx := context.Background()
	_, clients := startNodes(t, 5)
	r := newRedlock(t, clients)
	if err := r.Subscribe(ctx); err != nil {
		t.Fatal(err)
	}
	each := func(f func(i int, c *redis.Client)) {
		for i, c := range clients {
			f(i, c)
		}
	}
	return harness{
		store: r,
		now: func() time.Time {
			tm, err := r.Time(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return tm
		},
		expire: func(d time.Duration) {
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
		ttls: func() map[string]time.Duration {
			out := map[string]time.Duration{}
			each(func(i int, c *redis.Client) {
				for _, k := range c.Keys(ctx, "*").Val() {
					out["node"+strconv.Itoa(i)+" "+k] = c.PTTL(ctx, k).Val()
				}
			})
			return out
		},
		plant: func(k, v string) {
			each(func(_ int, c *redis.Client) { c.Set(ctx, k, v, time.Hour) })
		},
	}
}
