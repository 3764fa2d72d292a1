package cli

import (
	"context"
	"strings"
	"testing"

	"github.com/slotd/slotd/lock/redislock"
)

// rerun of a free slot (no state, no attempts) with no daemon running did
// nothing and said "woke 0 replicas", exit 0; it now says there was
// nothing to rerun and that no replica is subscribed, and exits 1. A slot
// that is cleared while no replica listens is said to wait for one.
func TestRerunFreeSlotSaysSo(t *testing.T) {
	s := newShared(t)
	free := s.latest("report")
	r := runCLI(t, "rerun", "-config", s.path, "report", free.ID)
	if r.code != exitError || !strings.Contains(r.stderr, "nothing to rerun") || !strings.Contains(r.stderr, "no replica is subscribed") ||
		!strings.Contains(r.stderr, free.ID) || strings.Contains(r.stdout, "woke 0") {
		t.Errorf("rerun of a free slot with no daemon: %v; want exit 1 saying there is nothing to rerun and no daemon listening", r)
	}

	// With a replica subscribed, still nothing to rerun: it is told how
	// many were asked to look again.
	ps := s.rdb.Subscribe(context.Background(), "slotd:released")
	defer ps.Close()
	if _, err := ps.Receive(context.Background()); err != nil {
		t.Fatal(err)
	}
	r = runCLI(t, "rerun", "-config", s.path, "report", free.ID)
	if r.code != exitError || !strings.Contains(r.stderr, "nothing to rerun") || !strings.Contains(r.stderr, "1 subscribed replica(s)") {
		t.Errorf("rerun of a free slot with a subscriber: %v", r)
	}
	ps.Close()

	done := s.latest("backup")
	s.done(done, "r1")
	doneKey, _ := redislock.Keys("slotd", done)
	waitNoSubscribers(t, s)
	r = runCLI(t, "rerun", "-config", s.path, "backup", done.ID)
	if r.code != exitOK || s.exists(doneKey) || !strings.Contains(r.stdout, "cleared slot "+done.ID) ||
		!strings.Contains(r.stdout, "no replica is subscribed") || strings.Contains(r.stdout, "woke 0") {
		t.Errorf("rerun of a done slot with no daemon: %v; want it cleared, saying no replica listens", r)
	}
}

// waitNoSubscribers waits until Redis has dropped the test's own
// subscription.
func waitNoSubscribers(t *testing.T, s *shared) {
	t.Helper()
	for range 500 {
		n, err := s.rdb.PubSubNumSub(context.Background(), "slotd:released").Result()
		if err == nil && n["slotd:released"] == 0 {
			return
		}
		s.rdb.Ping(context.Background())
	}
	t.Fatal("the subscription outlived its Close")
}
