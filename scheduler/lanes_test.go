package scheduler_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/slotd/slotd/internal/etcdtest"
	"github.com/slotd/slotd/internal/testlane"
	"github.com/slotd/slotd/internal/zktest"
)

// The lanes the parallel tests run in (package testlane): one heavy test
// at a time (a ZooKeeper ensemble of three members, or clusters of
// several stores in turn: leaders killed, clocks skewed), one etcd-only
// cluster test beside it, and two light ones. Tests that assert a tight
// latency stay serial, before all three. With the etcd tests in the heavy
// lane, the heavy tests ran alone for the package's last 310 s of 590
// (a full -race run), the light lane empty; two heavy tests of any kind
// at a time ran two ZooKeeper ensembles at once, and one lost its quorum
// for 30 s under load.
var (
	heavyLane = testlane.New(1)
	etcdLane  = testlane.New(1)
	lightLane = testlane.New(2)
)

func TestMain(m *testing.M) {
	if err := testlane.Unbound(); err != nil {
		fmt.Fprintln(os.Stderr, "scheduler:", err)
		os.Exit(2)
	}
	code := m.Run()
	// The clusters the tests shared (consensusStores), after every test.
	etcdtest.StopShared()
	zktest.StopShared()
	os.Exit(code)
}
