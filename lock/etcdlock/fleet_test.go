package etcdlock_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/slotd/slotd/internal/etcdtest"
	"github.com/slotd/slotd/lock/etcdlock"
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

// An entry whose lease has under a second left is still there: etcd
// reports its TTL as 0 (whole seconds, rounded down) and -1 only once the
// lease is gone. Read as gone, a presence renewal in its last second could
// not compare-and-set the entry it found (every try reads version 0, and
// the create fails), and the live set flapped.
func TestEntryInItsLastSecondIsThere(t *testing.T) {
	c := etcdtest.Start(t, 1)
	cli := client(t, c.Endpoints())
	e := etcdlock.KV(newStore(t, c.Endpoints()))
	ctx := context.Background()
	if ok, err := e.Put(ctx, "replica", "r1", "r1#1", 0, time.Second); err != nil || !ok {
		t.Fatalf("put: %v, %v", ok, err)
	}
	resp, err := cli.Get(ctx, "slotd:", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	var lease clientv3.LeaseID
	for _, kv := range resp.Kvs {
		if string(kv.Value) == "r1#1" {
			lease = clientv3.LeaseID(kv.Lease)
		}
	}
	if lease == 0 {
		t.Fatalf("the entry as put, on a lease: not among %d keys", len(resp.Kvs))
	}
	for {
		ttl, err := cli.TimeToLive(ctx, lease)
		if err != nil {
			t.Fatal(err)
		}
		if ttl.TTL < 0 {
			t.Fatal("the lease ran out before a read saw it in its last second")
		}
		if ttl.TTL == 0 {
			break
		}
		time.Sleep(50 * time.Millisecond) // etcd counts the lease down; nothing to await
	}
	got, err := e.Get(ctx, "replica", "r1")
	if err != nil || got.Version == 0 || got.Value != "r1#1" {
		t.Fatalf("get in the entry's last second: %+v, %v; want the entry", got, err)
	}
}
