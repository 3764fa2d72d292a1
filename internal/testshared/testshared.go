// Package testshared lets a test server outlive the test that starts it,
// so that the tests of a package can share one: an etcd cluster or a
// ZooKeeper ensemble that tests only read and write, each under a key
// prefix of its own, started once by the first test that asks for it and
// stopped when the package's tests have ended (TestMain calls End).
package testshared

import (
	"os"
	"slices"
	"sync"
	"testing"
)

// Life owns the temp dirs and cleanups of the servers started through TB,
// until End.
type Life struct {
	mu       sync.Mutex
	dir      string
	cleanups []func()
}

// TB is t for starting a server that outlives it: t's failures, skips and
// logs stay t's, but its TempDir and Cleanup are l's. It is for the
// start only: a failure reported through it after t has ended panics.
func (l *Life) TB(t testing.TB) testing.TB { return lifeTB{TB: t, l: l} }

// End runs the cleanups registered through TB, last first, and removes
// the temp dirs.
func (l *Life) End() {
	l.mu.Lock()
	cleanups, dir := l.cleanups, l.dir
	l.cleanups, l.dir = nil, ""
	l.mu.Unlock()
	for _, f := range slices.Backward(cleanups) {
		f()
	}
	if dir != "" {
		os.RemoveAll(dir)
	}
}

type lifeTB struct {
	testing.TB
	l *Life
}

func (x lifeTB) TempDir() string {
	x.TB.Helper()
	x.l.mu.Lock()
	defer x.l.mu.Unlock()
	if x.l.dir == "" {
		dir, err := os.MkdirTemp("", "slotd-shared-")
		if err != nil {
			x.TB.Fatalf("testshared: %v", err)
		}
		x.l.dir = dir
	}
	dir, err := os.MkdirTemp(x.l.dir, "")
	if err != nil {
		x.TB.Fatalf("testshared: %v", err)
	}
	return dir
}

func (x lifeTB) Cleanup(f func()) {
	x.l.mu.Lock()
	defer x.l.mu.Unlock()
	x.l.cleanups = append(x.l.cleanups, f)
}

// Servers keeps one shared server (a cluster, an ensemble) per member
// count, each started through a Life by the first test that asks for it.
// Set Start before the first Get.
type Servers[S any] struct {
	Start func(t testing.TB, n int) S // starts a server of n members, failing t if it cannot

	mu   sync.Mutex
	life Life
	by   map[int]S
}

// Get returns the shared server of n members, started now if no test has
// asked for one yet (its start's failure is t's).
func (p *Servers[S]) Get(t testing.TB, n int) S {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if s, ok := p.by[n]; ok {
		return s
	}
	s := p.Start(p.life.TB(t), n)
	if p.by == nil {
		p.by = map[int]S{}
	}
	p.by[n] = s
	return s
}

// End stops the servers Get started and removes their data.
func (p *Servers[S]) End() {
	p.mu.Lock()
	p.by = nil
	p.mu.Unlock()
	p.life.End()
}
