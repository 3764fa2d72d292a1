package etcdlock

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/slotd/slotd/internal/etcdtest"
)

// An entry whose lease has under a second left is still there: etcd
// reports its TTL as 0 (whole seconds, rounded down) and -1 only once the
// lease is gone. Read as gone, a presence renewal in its last second could
// not compare-and-set the entry it found (every try reads version 0, and
// the create fails), and the live set flapped.
func TestEntryInItsLastSecondIsThere(t *testing.T) {
	c := etcdtest.Start(t, 1)
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	s := New(cli, "slotd")
	t.Cleanup(func() { s.Close(); cli.Close() })
	ctx := context.Background()
	e := etcdKV{s}
	if ok, err := e.Put(ctx, "replica", "r1", "r1#1", 0, time.Second); err != nil || !ok {
		t.Fatalf("put: %v, %v", ok, err)
	}
	resp, err := cli.Get(ctx, e.key("replica", "r1"))
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Lease == 0 {
		t.Fatalf("the entry as put: %+v, %v", resp, err)
	}
	lease := clientv3.LeaseID(resp.Kvs[0].Lease)
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
