// Package testlane shares a test binary's cores between its parallel
// tests by kind, where -parallel counts them all alike. A heavy test (an
// etcd or ZooKeeper cluster of three members, its leader killed or its
// clocks skewed: timings more such tests beside it would stretch) runs
// in a narrow lane; light tests in a lane of their own beside it. Before
// lanes, the heavy tests were left serial, so they ran one by one before
// any other: in package scheduler 234 of 392 s.
//
// A package's TestMain calls Unbound, so that every parallel test is let
// in and then waits for its lane; each test calls Parallel with its lane
// where it would call t.Parallel.
package testlane

import (
	"flag"
	"testing"
)

// Lane admits up to its capacity of tests at a time.
type Lane chan struct{}

// New is a lane of n tests at a time.
func New(n int) Lane { return make(Lane, n) }

// Parallel runs t in parallel with the package's other tests, once l has
// room; t holds its place until it and its subtests have ended. The
// parallel subtests of a test that holds a place must take another lane:
// waiting for their parent's, they could wait for ever.
func Parallel(t *testing.T, l Lane) {
	t.Helper()
	t.Parallel()
	l <- struct{}{}
	t.Cleanup(func() { <-l })
}

// Unbound lifts -parallel's bound unless the command line set it, so that
// the lanes alone bound the tests; it parses the flags.
func Unbound() error {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if set {
		return nil
	}
	return flag.Set("test.parallel", "1000")
}
