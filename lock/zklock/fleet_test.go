package zklock_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/slotd/slotd/internal/zktest"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/locktest"
	"github.com/slotd/slotd/lock/zklock"
)

// kvTTL is what is left, at now by the leader's clock, of a kv entry's
// TTL (a node under <root>/.kv/<dir>/ whose data is "<TTL ms>\n<value>"),
// or 0 if p is not one.
func kvTTL(s *zklock.Store, p string, data []byte, st *zk.Stat, now time.Time) time.Duration {
	rest, ok := strings.CutPrefix(p, s.Root()+"/.kv/")
	if !ok || !strings.Contains(rest, "/") {
		return 0
	}
	ms, _, ok := strings.Cut(string(data), "\n")
	n, err := strconv.ParseInt(ms, 10, 64)
	if !ok || err != nil {
		return 0
	}
	return time.Duration(n)*time.Millisecond - now.Sub(time.UnixMilli(st.Mtime))
}

// The fleet's suite on a three-member ensemble: presence with the live
// set and its notices (a child watch), a second instance of an id
// refused, the first start.
func TestFleetConformance(t *testing.T) {
	servers, root := shared(t)
	s := dialOn(t, servers, 10*time.Second, root)
	locktest.RunFleet(t, harness(t, s), 2*time.Second)
}

// An entry expires by the leader's clock even while its node is still
// there (the server deletes an expired TTL node only at its next sweep):
// a once marker whose TTL has passed is set again.
func TestOnceExpiresByTheLeadersClock(t *testing.T) {
	e := zktest.Start(t, 1)
	s := dial(t, e, 10*time.Second, "/slotd")
	ctx := context.Background()
	slot := lock.Slot{Task: "t/with slash", ID: "2024011514"}
	const ttl = 300 * time.Millisecond
	if first, err := s.Once(ctx, slot, "failure", "r1", ttl); err != nil || !first {
		t.Fatalf("once = %v, %v; want true", first, err)
	}
	if first, err := s.Once(ctx, slot, "failure", "r2", ttl); err != nil || first {
		t.Fatalf("once again = %v, %v; want false", first, err)
	}
	start, err := s.Time(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for { // the leader's clock, not this process's, says when it has expired
		now, err := s.Time(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if now.Sub(start) > ttl {
			break
		}
		time.Sleep(ttl / 4)
	}
	if first, err := s.Once(ctx, slot, "failure", "r3", ttl); err != nil || !first {
		t.Fatalf("once after the TTL = %v, %v; want true (the node was still there: %v)", first, err, nodeThere(t, s))
	}
}

func nodeThere(t *testing.T, s *zklock.Store) bool {
	kids, _, err := s.Conn().Children(s.Root() + "/.kv/once")
	return err == nil && len(kids) > 0
}

// The operator controls' suite on a three-member ensemble.
func TestControlsConformance(t *testing.T) {
	servers, root := shared(t)
	s := dialOn(t, servers, 10*time.Second, root)
	locktest.RunControls(t, harness(t, s))
}
