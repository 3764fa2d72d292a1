package etcdlock_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/slotd/slotd/internal/etcdtest"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/etcdlock"
	"github.com/slotd/slotd/lock/internal/kv"
	"github.com/slotd/slotd/lock/locktest"
)

// policy is the suite's policy here: etcd's leases cannot be shortened, so
// the lease is short (two seconds, a whole number: etcd's unit) and Expire
// waits for real time.
var policy = lock.Policy{Lease: 2 * time.Second, DoneTTL: time.Hour, MaxAttempts: 3}

// client is an etcd client on c, closed at cleanup.
func client(t testing.TB, endpoints []string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// newStore is a Store on c under prefix "slotd", subscribed, closed at
// cleanup.
func newStore(t *testing.T, endpoints []string) *etcdlock.Store {
	t.Helper()
	s := etcdlock.New(client(t, endpoints), "slotd")
	t.Cleanup(func() { s.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Subscribe(ctx); err != nil {
		t.Fatal(err)
	}
	return s
}

func harness(t *testing.T, c *etcdtest.Cluster) locktest.Harness {
	ctx := context.Background()
	s := newStore(t, c.Endpoints())
	cli := client(t, c.Endpoints())
	type keyRev struct {
		key string
		rev int64
	}
	all := func() []*clientv3.GetResponse {
		resp, err := cli.Get(ctx, "slotd", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		return []*clientv3.GetResponse{resp}
	}
	plant := func(key, v string) {
		l, err := cli.Grant(ctx, 3600)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Put(ctx, key, v, clientv3.WithLease(l.ID)); err != nil {
			t.Fatal(err)
		}
	}
	return locktest.Harness{
		Store:  s,
		Policy: policy,
		Now: func() time.Time {
			tm, err := s.Time(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return tm
		},
		// Expire waits d, then until every key on a lease granted for at
		// most d is gone (etcd revokes expired leases every half second).
		Expire: func(d time.Duration) {
			var due []keyRev
			for _, kv := range all()[0].Kvs {
				if kv.Lease == 0 {
					continue
				}
				ttl, err := cli.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
				if err == nil && time.Duration(ttl.GrantedTTL)*time.Second <= d {
					due = append(due, keyRev{string(kv.Key), kv.ModRevision})
				}
			}
			time.Sleep(d)
			deadline := time.Now().Add(3 * time.Second)
			for _, k := range due {
				for {
					resp, err := cli.Get(ctx, k.key)
					if err != nil {
						t.Fatal(err)
					}
					if len(resp.Kvs) == 0 || resp.Kvs[0].ModRevision != k.rev {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("key %s still there %v after its lease", k.key, d)
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
		},
		TTLs: func() map[string]time.Duration {
			out := map[string]time.Duration{}
			for _, kv := range all()[0].Kvs {
				var ttl time.Duration
				if kv.Lease != 0 {
					resp, err := cli.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
					if err == nil && resp.TTL >= 0 {
						// whole seconds, rounded down: a lease with less
						// than a second left still has one
						ttl = time.Duration(resp.TTL)*time.Second + time.Millisecond
					}
					if err == nil && resp.TTL < 0 {
						// The lease was revoked since the keys were read
						// (a release's notice lives seconds): its keys
						// went with it, unless the store left one behind.
						if g, err := cli.Get(ctx, string(kv.Key)); err == nil && len(g.Kvs) == 0 {
							continue
						}
					}
				}
				out[string(kv.Key)] = ttl
			}
			return out
		},
		PlantState:    func(s lock.Slot, v string) { st, _ := etcdlock.Keys("slotd", s); plant(st, v) },
		PlantAttempts: func(s lock.Slot, v string) { _, at := etcdlock.Keys("slotd", s); plant(at, v) },
		PlantTriggerKeys: func(task string, keys []string) {
			now, err := s.Time(ctx)
			if err == nil {
				err = kv.PlantTriggerKeys(ctx, etcdlock.KV(s), task, now.Unix(), keys)
			}
			if err != nil {
				t.Fatal(err)
			}
		},
	}
}

// The etcd store passes the suite every store passes, on a three-member
// cluster.
func TestConformance(t *testing.T) {
	c := etcdtest.Start(t, 3)
	locktest.Run(t, harness(t, c))
}
