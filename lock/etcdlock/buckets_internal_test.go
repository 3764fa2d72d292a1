package etcdlock

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// grantOnly is an etcd lease API that grants every lease at once, and
// does nothing else.
type grantOnly struct {
	clientv3.Lease
	last atomic.Int64
}

func (g *grantOnly) Grant(context.Context, int64) (*clientv3.LeaseGrantResponse, error) {
	return &clientv3.LeaseGrantResponse{ID: clientv3.LeaseID(g.last.Add(1))}, nil
}

// grantingLeases is leases over grantOnly, with n bucket leases granted
// before, each of whose buckets ends within ttl from now.
func grantingLeases(n int, ttl time.Duration) *leases {
	ls := &leases{cli: &clientv3.Client{Lease: &grantOnly{}}, base: time.Now(),
		current: map[runKey]*runLease{}, byID: map[clientv3.LeaseID]*runLease{},
		buckets: map[time.Duration]*bucketLease{}, ends: map[clientv3.LeaseID]time.Duration{}}
	for i := range n {
		ls.ends[clientv3.LeaseID(-1-i)] = ttl
	}
	return ls
}

// BenchmarkBucketGrant prices the grant of a bucket lease (one per
// keysPerLease writes of a done TTL) as the bucket leases granted within
// the done TTL grow: 10,000 claims a second with done_ttl 2h46m40s (the
// default of a task due every second) grant 78 a second and hold 780,000.
// The cost per grant is the same at 10,000 leases held as at 100,000.
//
//	go test -run '^$' -bench BucketGrant -benchmem ./lock/etcdlock/
func BenchmarkBucketGrant(b *testing.B) {
	const ttl = 10000 * time.Second
	for _, n := range []int{10000, 100000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			ls := grantingLeases(n, ttl)
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				for _, bl := range ls.buckets {
					bl.writes = keysPerLease // full: the next write is granted another
				}
				if _, err := ls.bucket(ctx, ttl); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/grant")
		})
	}
}

// The bucket leases' ends are swept when they have doubled since the last
// sweep: the ended go, the others stay; until then an ended one is kept,
// and never preferred.
func TestBucketEndsSweptAsTheyDouble(t *testing.T) {
	const ttl = time.Hour
	ls := grantingLeases(100, ttl) // 100 whose bucket ends within the hour
	ctx := context.Background()
	const ended = clientv3.LeaseID(-1000)
	ls.ends[ended] = -time.Second
	grant := func() clientv3.LeaseID {
		t.Helper()
		for _, bl := range ls.buckets {
			bl.writes = keysPerLease
		}
		id, err := ls.bucket(ctx, ttl)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	grant() // 101 < 2×64: not swept
	if _, ok := ls.ends[ended]; !ok || len(ls.ends) != 102 {
		t.Fatalf("%d ends, the ended one kept: %v; want 102, kept (no sweep yet)", len(ls.ends), ok)
	}
	if id, err := ls.bucketOf(ctx, ttl, ended); err != nil || id == ended {
		t.Fatalf("bucketOf preferring an ended lease: %v, %v; want another", id, err)
	}
	for len(ls.ends) < 128 {
		grant()
	}
	grant() // 128 ≥ 2×64: swept, then the new one added
	if _, ok := ls.ends[ended]; ok || ls.swept != 127 || len(ls.ends) != 128 {
		t.Fatalf("after the sweep: the ended one kept %v, %d left, %d after the grant; want gone, 127, 128", ok, ls.swept, len(ls.ends))
	}
}

// BenchmarkRunLeaseGrant prices the grant of a running lease (one per
// keysPerLease claims) as the running leases that may still hold slots
// grow: they are kept for twice the lease after their last renewal, so
// 10,000 claims a second on 15 s leases hold about 2,300 (78 grants a
// second for 30 s), and the leases of running attempts add one per 128
// attempts running (100,000 running: 800). Its walk is left as it is:
// 0.1-0.2 ms a grant at 2,300 leases on a loaded machine, 1-2 % of a core
// and of the mutex's time at 78 grants a second.
//
//	go test -run '^$' -bench RunLeaseGrant -benchmem ./lock/etcdlock/
func BenchmarkRunLeaseGrant(b *testing.B) {
	for _, n := range []int{2300, 23000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			ls := grantingLeases(0, 0)
			for i := range n {
				ls.byID[clientv3.LeaseID(-1-i)] = &runLease{key: runKey{"peer", 15}, confirmed: time.Now()}
			}
			ctx := context.Background()
			k := runKey{"r0", 15}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				ls.mu.Lock()
				t, err := ls.grant(ctx, k) // unlocks
				if err != nil {
					b.Fatal(err)
				}
				delete(ls.byID, t.id) // n held, as when as many stop being renewed

			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/grant")
		})
	}
}
