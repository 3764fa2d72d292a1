package zklock_test

import (
	"context"
	"fmt"
	"path"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/slotd/slotd/internal/zktest"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/internal/kv"
	"github.com/slotd/slotd/lock/locktest"
	zklock "github.com/slotd/slotd/lock/zklock"
)

// dial opens a store on the ensemble, closed at cleanup.
func dial(t *testing.T, e *zktest.Ensemble, timeout time.Duration, root string) *zklock.Store {
	t.Helper()
	return dialOn(t, e.Servers(), timeout, root)
}

// sharedRoots numbers the roots of the tests on the shared ensemble.
var sharedRoots atomic.Int64

// shared is the package's three-member ensemble (zktest.Shared) and a
// root no other test uses, for a test that does nothing to the members:
// the conformance suites and the watch tests each started an ensemble of
// their own, about 2 CPU-seconds and 1.5 s each.
func shared(t *testing.T) (servers []string, root string) {
	t.Helper()
	return zktest.Shared(t, 3), fmt.Sprintf("/slotd%d", sharedRoots.Add(1))
}

// dialOn opens a store under root on the members at servers, closed at
// cleanup.
func dialOn(t *testing.T, servers []string, timeout time.Duration, root string) *zklock.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := zklock.Dial(ctx, zklock.Options{Servers: servers, SessionTimeout: timeout, Root: root})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// dialWith opens a store on the ensemble as o says (servers, root /slotd
// and a 10s session timeout when unset), closed at cleanup.
func dialWith(t *testing.T, e *zktest.Ensemble, o zklock.Options) *zklock.Store {
	t.Helper()
	if o.Servers == nil {
		o.Servers = e.Servers()
	}
	if o.Root == "" {
		o.Root = "/slotd"
	}
	if o.SessionTimeout == 0 {
		o.SessionTimeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := zklock.Dial(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// shortLease is the policy of the tests that claim slots by hand.
var shortLease = lock.Policy{Lease: time.Second, DoneTTL: time.Hour, MaxAttempts: 3}

// openSlot is slot id of task payroll, its window open by s's clock: from
// a second ago, for an hour.
func openSlot(ctx context.Context, t *testing.T, s *zklock.Store, id string) lock.Slot {
	t.Helper()
	now, err := s.Time(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return lock.Slot{Task: "payroll", ID: id, Time: now.Add(-time.Second), Deadline: now.Add(time.Hour)}
}

// walk visits every node under root, children first, with its stat.
func walk(t *testing.T, c *zk.Conn, root string, visit func(p string, st *zk.Stat, children []string)) {
	kids, st, err := c.Children(root)
	if err == zk.ErrNoNode {
		return
	}
	if err != nil {
		t.Fatalf("children of %s: %v", root, err)
	}
	for _, k := range kids {
		walk(t, c, path.Join(root, k), visit)
	}
	visit(root, st, kids)
}

// harness is the conformance harness of a store on e. Time cannot be moved
// on ZooKeeper, so passing time is shown to the nodes, as the Redis
// harness does with TTLs: a run node goes when d reaches the session
// timeout (its holder's session would have expired: a pause that long
// stops its pings), a TTL node when d reaches what is left of its TTL.
func harness(t *testing.T, s *zklock.Store) locktest.Harness {
	ctx := context.Background()
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := s.Subscribe(sctx); err != nil { // the release notices' first listing
		t.Fatal(err)
	}
	c := s.Conn()
	now := func() time.Time {
		tm, err := s.Time(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	ttls := func() map[string]time.Duration {
		out := map[string]time.Duration{}
		at := now()
		walk(t, c, s.Root(), func(p string, st *zk.Stat, kids []string) {
			data, _, err := c.Get(p)
			switch {
			case err == zk.ErrNoNode:
				return
			case err != nil:
				t.Fatalf("get %s: %v", p, err)
			case st.EphemeralOwner != 0:
				out[p] = s.SessionTimeout()
			case path.Dir(p) == s.Root()+"/.released":
				// a release notice: a TTL node, reaped once its TTL is
				// over (within the servers' check interval)
				out[p] = max(zklock.NoticeTTL-at.Sub(time.UnixMilli(st.Mtime)), time.Millisecond)
			case p == s.Root()+"/.clock":
				out[p] = zklock.ClockTTL - at.Sub(time.UnixMilli(st.Mtime))
			case path.Dir(p) == s.Root()+"/.tally":
				// a replica's tallies: a TTL node, its TTL on the first line
				ms, _, _ := strings.Cut(string(data), "\n")
				n, _ := strconv.ParseInt(ms, 10, 64)
				out[p] = time.Duration(n)*time.Millisecond - at.Sub(time.UnixMilli(st.Mtime))
			case kvTTL(s, p, data, st, at) != 0:
				out[p] = kvTTL(s, p, data, st, at)
			case zklock.SlotTTL(data, st, at) != 0:
				out[p] = zklock.SlotTTL(data, st, at)
			case p == s.Root() || path.Dir(p) == s.Root() || path.Dir(p) == s.Root()+"/.kv":
				// A container goes with its last child: it lives as long
				// as the longest-lived of them (the reaper is quick).
				ttl := time.Duration(0)
				for _, k := range kids {
					ttl = max(ttl, out[path.Join(p, k)])
				}
				if len(kids) == 0 {
					ttl = time.Second
				}
				out[p] = ttl
			default:
				out[p] = 0
			}
		})
		return out
	}
	plant := func(p string, v string) {
		if _, err := c.CreateTTL(p, []byte(v), zk.FlagTTL, zk.WorldACL(zk.PermAll), time.Hour); err != nil && err != zk.ErrNodeExists {
			t.Fatalf("plant %s: %v", p, err)
		}
	}
	parents := func(slot lock.Slot) {
		for _, p := range []string{s.Root(), s.TaskPath(slot.Task)} {
			if _, err := c.CreateContainer(p, nil, zk.FlagContainer, zk.WorldACL(zk.PermAll)); err != nil && err != zk.ErrNodeExists {
				t.Fatalf("create %s: %v", p, err)
			}
		}
	}
	return locktest.Harness{
		Store: s,
		Now:   now,
		Expire: func(d time.Duration) {
			for p, ttl := range ttls() {
				if ttl <= d && (path.Base(p) == "run" || path.Dir(path.Dir(p)) == s.Root()+"/.kv" || path.Dir(p) == s.Root()+"/.tally") {
					if err := c.Delete(p, -1); err != nil && err != zk.ErrNoNode {
						t.Fatalf("expire %s: %v", p, err)
					}
				}
			}
		},
		TTLs: ttls,
		PlantState: func(slot lock.Slot, v string) {
			parents(slot)
			plant(s.SlotPath(slot), "0\n0\n3600000\n")
			plant(s.RunPath(slot), v)
		},
		PlantAttempts: func(slot lock.Slot, v string) {
			parents(slot)
			plant(s.SlotPath(slot), v)
		},
		PlantTriggerKeys: func(task string, keys []string) {
			if err := kv.PlantTriggerKeys(context.Background(), zklock.KV(s), task, now().Unix(), keys); err != nil {
				t.Fatal(err)
			}
		},
		Policy: lock.Policy{Lease: s.SessionTimeout(), DoneTTL: time.Hour, MaxAttempts: 3},
	}
}

// TestConformance runs the suite every store passes on a three-member
// ensemble.
func TestConformance(t *testing.T) {
	servers, root := shared(t)
	s := dialOn(t, servers, 10*time.Second, root)
	locktest.Run(t, harness(t, s))
}
