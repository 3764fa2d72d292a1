package redislock_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/redislock"
)

// BenchmarkRedlockConfigure measures a replica's first start with 1,000
// tasks on 3 Redlock masters (Configure of tasks never seen: one write of
// each task's applied value, a few tasks at once) and a sweep after it
// (Paused of the 1,000 with renew, as every replica runs each
// lock.ControlsSweep), beside one server's same calls in the same run:
//
//	go test -run '^$' -bench RedlockConfigure -benchtime 3x ./lock/redislock/
func BenchmarkRedlockConfigure(b *testing.B) {
	_, clients := startNodes(b, 3)
	single := redistest.Start(b).Client()
	stores := map[string]lock.Controls{
		"redlock3": newRedlockB(b, clients),
		"redis":    redislock.New(single, "slotd"),
	}
	ctx := context.Background()
	const n = 1000
	for name, c := range stores {
		b.Run(name+"/configure", func(b *testing.B) {
			for i := range b.N {
				tasks, paused := make([]string, n), make([]bool, n)
				for j := range tasks {
					tasks[j] = "t" + strconv.Itoa(i) + "-" + strconv.Itoa(j)
					paused[j] = j%2 == 0
				}
				if _, err := c.Configure(ctx, tasks, paused); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/sweep", func(b *testing.B) {
			tasks := make([]string, n)
			for j := range tasks {
				tasks[j] = "t0-" + strconv.Itoa(j)
			}
			for range b.N {
				if _, err := c.Paused(ctx, tasks, true); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func newRedlockB(b *testing.B, clients []*redis.Client) *redislock.Redlock {
	nodes := make([]redislock.Client, len(clients))
	for i, c := range clients {
		nodes[i] = c
	}
	r, err := redislock.NewRedlock(nodes, "slotd", redislock.WithNodeTimeout(5*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { r.Close() })
	return r
}
