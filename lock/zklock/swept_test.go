package zklock_test

import (
	"context"
	"path"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/slotd/slotd/internal/zktest"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/zklock"
)

// A put-if-absent over an expired TTL node that the server's sweep deletes
// between the put's read and its write creates the entry: the node is
// absent, as the caller asked. Before, the write's "no node" answered
// false, and a once marker whose TTL had passed was not set again (seen
// only under load, by TestOnceExpiresByTheLeadersClock). The sweep is
// made at that instant here. Both writes are covered: a set (the same
// TTL) and a delete before the create (another TTL).
func TestPutOverSweptNodeCreates(t *testing.T) {
	e := zktest.Start(t, 1)
	s := dial(t, e, 10*time.Second, "/slotd")
	ctx := context.Background()
	const ttl = 200 * time.Millisecond
	for _, tc := range []struct {
		name  string
		again time.Duration
	}{{"same TTL", ttl}, {"other TTL", 2 * ttl}} {
		t.Run(tc.name, func(t *testing.T) {
			slot := lock.Slot{Task: "swept-" + tc.name, ID: "2024011514"}
			if first, err := s.Once(ctx, slot, "failure", "r1", ttl); err != nil || !first {
				t.Fatalf("once = %v, %v; want true", first, err)
			}
			// The marker's node again, with the same data (the entry's TTL
			// of ttl) but a server TTL of an hour: the server's own sweep
			// stays away, and the test makes it at the instant it needs.
			p := onceNode(t, s)
			data, _, err := s.Conn().Get(p)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Conn().Delete(p, -1); err != nil {
				t.Fatal(err)
			}
			// Its parent is a container: left empty, the server's reaper
			// may delete it before the create (a flake under load). Made
			// again, as the store makes it.
			for _, err := s.Conn().CreateTTL(p, data, zk.FlagTTL, s.ACL(), time.Hour); err != nil; _, err = s.Conn().CreateTTL(p, data, zk.FlagTTL, s.ACL(), time.Hour) {
				if err != zk.ErrNoNode {
					t.Fatal(err)
				}
				for d := s.Root(); d != path.Dir(p); { // every container above it, from the root
					d += "/" + strings.SplitN(strings.TrimPrefix(p, d+"/"), "/", 2)[0]
					if _, err := s.Conn().CreateContainer(d, nil, zk.FlagContainer, s.ACL()); err != nil && err != zk.ErrNodeExists {
						t.Fatalf("the marker's parent %s: %v", d, err)
					}
				}
			}
			start, err := s.Time(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for { // the leader's clock says when the entry has expired
				now, err := s.Time(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if now.Sub(start) > ttl {
					break
				}
				time.Sleep(ttl / 4)
			}
			var swept atomic.Int32
			restore := zklock.AfterPutRead(func(p string) {
				if err := s.Conn().Delete(p, -1); err == nil {
					swept.Add(1)
				}
			})
			first, err := s.Once(ctx, slot, "failure", "r2", tc.again)
			restore()
			if n := swept.Load(); n != 1 {
				t.Fatalf("the expired node was swept %d times between a put's read and its write, want 1: the test shows nothing", n)
			}
			if err != nil || !first {
				t.Fatalf("once over the swept node = %v, %v; want true (node there: %v)", first, err, nodeThere(t, s))
			}
			if first, err := s.Once(ctx, slot, "failure", "r3", tc.again); err != nil || first {
				t.Fatalf("once again = %v, %v; want false: the put did not create the entry", first, err)
			}
			if err := s.Conn().Delete(onceNode(t, s), -1); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// onceNode is the one once marker's node under s.
func onceNode(t *testing.T, s *zklock.Store) string {
	t.Helper()
	var found []string
	walk(t, s.Conn(), s.Root()+"/.kv/once", func(p string, st *zk.Stat, children []string) {
		if st.EphemeralOwner == 0 && len(children) == 0 && st.DataLength > 0 {
			found = append(found, p)
		}
	})
	if len(found) != 1 {
		t.Fatalf("once markers: %q, want one", found)
	}
	return found[0]
}
