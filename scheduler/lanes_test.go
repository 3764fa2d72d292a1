package scheduler_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/slotd/slotd/internal/testlane"
)

// The lanes the parallel tests run in (package testlane): two heavy tests
// at a time (an etcd or ZooKeeper cluster of three members, its leader
// killed or its clocks skewed) beside two light ones. Tests that assert a
// tight latency stay serial, before both. With one heavy test at a time,
// the heavy ones ran alone for the package's last 150-270 s (sum of their
// times), after the light lane had emptied.
var (
	heavyLane = testlane.New(2)
	lightLane = testlane.New(2)
)

func TestMain(m *testing.M) {
	if err := testlane.Unbound(); err != nil {
		fmt.Fprintln(os.Stderr, "scheduler:", err)
		os.Exit(2)
	}
	os.Exit(m.Run())
}
