package redislock_test

import (
	"testing"

	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/lock/locktest"
	"github.com/slotd/slotd/lock/redislock"
)

// TestControlsConformance runs the operator controls' suite on every store
// of this package: one server, and a Redlock quorum of 3 masters.
func TestControlsConformance(t *testing.T) {
	stores := map[string]func(*testing.T) locktest.Harness{
		"redis":   redisHarness,
		"redlock": func(t *testing.T) locktest.Harness { return redlockHarnessOf(t, 3) },
	}
	for name, mk := range stores {
		t.Run(name, func(t *testing.T) { locktest.RunControls(t, mk(t)) })
	}
}

// The controls' suite on a 3-master Redis Cluster: each script touches
// keys of one hash tag (a CROSSSLOT error would fail it), and the task's
// notice published on one shard reaches the subscriber on another.
func TestControlsConformanceCluster(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 3)
	rdb := c.Client()
	keys := func() []string {
		var out []string
		for k := range clusterKeys(t, rdb) {
			out = append(out, k)
		}
		return out
	}
	locktest.RunControls(t, clientHarness(t, rdb, redislock.New(rdb, "slotd"), keys))
}
