package etcdlock_test

import (
	"testing"
	"time"

	"github.com/slotd/slotd/internal/etcdtest"
	"github.com/slotd/slotd/lock/locktest"
)

// The fleet's suite on a three-member cluster: presence with the live set
// and its notices, a second instance of an id refused, the first start.
// Presence TTLs are leases: two seconds, etcd's unit times two.
func TestFleetConformance(t *testing.T) {
	c := etcdtest.Start(t, 3)
	locktest.RunFleet(t, harness(t, c), 2*time.Second)
}

// The operator controls' suite on a three-member cluster.
func TestControlsConformance(t *testing.T) {
	c := etcdtest.Start(t, 3)
	locktest.RunControls(t, harness(t, c))
}
