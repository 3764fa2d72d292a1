package memlock_test

import (
	"sync"
	"testing"
	"time"

	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/locktest"
	"github.com/slotd/slotd/lock/memlock"
)

// schemaKeys are the state and attempts keys of slot: the Redis layout,
// which the store follows.
func schemaKeys(prefix string, s lock.Slot) (state, attempts string) {
	state = prefix + ":{" + s.Task + ":" + s.ID + "}"
	return state, state + ":attempts"
}

func memoryHarness(t *testing.T) locktest.Harness {
	var mu sync.Mutex
	clock := time.Date(2024, 1, 15, 14, 0, 0, 0, time.UTC)
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	m := memlock.New(now)
	return locktest.Harness{
		Store: m,
		Now:   now,
		Expire: func(d time.Duration) {
			mu.Lock()
			clock = clock.Add(d)
			mu.Unlock()
		},
		Sleep: func(d time.Duration) {
			mu.Lock()
			clock = clock.Add(d)
			mu.Unlock()
		},
		TTLs:          m.TTLs,
		PlantState:    func(s lock.Slot, v string) { st, _ := schemaKeys("slotd", s); m.Set(st, v, time.Hour) },
		PlantAttempts: func(s lock.Slot, v string) { _, at := schemaKeys("slotd", s); m.Set(at, v, time.Hour) },
	}
}

// TestConformance runs the slot protocol's suite on the store.
func TestConformance(t *testing.T) { locktest.Run(t, memoryHarness(t)) }

// TestControlsConformance runs the operator controls' suite on the store.
func TestControlsConformance(t *testing.T) { locktest.RunControls(t, memoryHarness(t)) }

// TestFleetConformance runs the fleet's suite on the store: the embedded
// daemon records its first start.
func TestFleetConformance(t *testing.T) { locktest.RunFleet(t, memoryHarness(t), time.Minute) }
