package scheduler_test

import (
	"context"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/lock/redislock"
)

// redlockConsensus is n Redlock stores on three independent masters, for
// the consensus controls tests: each store has its own clients, closed at
// once by its crash (nothing it held is released or renewed after); the
// "leader" killed is master 0, killed by its pid. Its restart does not
// start it again: a Redlock master restarted empty must stay down past
// the done TTL (docs/stores.md, the restart rule), longer than a test.
func redlockConsensus(t *testing.T, n int) consensus {
	var masters []*redistest.Server
	for range 3 {
		masters = append(masters, redistest.Start(t))
	}
	var c consensus
	for range n {
		var clients []redislock.Client
		for _, m := range masters {
			clients = append(clients, m.Client())
		}
		s, err := redislock.NewRedlock(clients, "slotd")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = s.Subscribe(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		c.stores = append(c.stores, s)
		c.crash = append(c.crash, func() {
			for _, cl := range clients {
				cl.(interface{ Close() error }).Close()
			}
		})
	}
	c.stopLeader = func() func() {
		masters[0].Stop()
		return func() {}
	}
	return c
}
