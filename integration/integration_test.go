package integration

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slotd/slotd/lock"
)

// Three replicas race for every one-second slot: each slot runs exactly
// once, as attempt 1, on one replica, not before its slot time, with a
// fencing token above the previous slot's; no slot between the first and
// the last observed is lost; each ends as a done marker with a TTL.
func TestEverySlotOnce(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.start(3, "1s", `lease = "2s"
max_attempts = 3
timeout = "1m"
catchup = "none"`,
		c.execTask("tick", "@every 1s", `rec start; sleep 0.2; rec end`, ""))

	c.ledger.await("6 completed slots", 40*time.Second, func(evs []event) bool {
		return slotsWith(evs, "end", 1) >= 6
	})
	// SIGTERM lets the attempt in flight finish (0.2s < shutdown_grace), so
	// after the exit every start has its end.
	c.stopAll()
	evs := c.ledger.read()
	slots := bySlot(evs)
	ids := sortedSlots(slots)
	if len(ids) < 6 {
		t.Fatalf("%d slots in the ledger, want >= 6:\n%s", len(ids), dump(evs))
	}

	var prev time.Time
	var prevToken int64
	for _, id := range ids {
		es := slots[id]
		at := slotTime(t, id)
		starts, ends := find(es, "start", 0), find(es, "end", 0)
		if len(starts) != 1 || len(ends) != 1 || len(es) != 2 {
			t.Errorf("slot %s: want one start and one end, got:\n%s", id, dump(es))
			continue
		}
		s, e := starts[0], ends[0]
		if s.Attempt != 1 || e.Attempt != 1 {
			t.Errorf("slot %s: attempt %d, want 1:\n%s", id, s.Attempt, dump(es))
		}
		if s.Replica != e.Replica || s.PGID != e.PGID {
			t.Errorf("slot %s: started and ended by different runs:\n%s", id, dump(es))
		}
		if s.At.Before(at) {
			t.Errorf("slot %s started %v before its slot time", id, at.Sub(s.At))
		}
		if want := lock.Token(at, 1); s.Token != want {
			t.Errorf("slot %s: fencing token %d, want %d (slot seconds*1000 + attempt)", id, s.Token, want)
		}
		if s.Token <= prevToken {
			t.Errorf("slot %s: fencing token %d not above the previous slot's %d", id, s.Token, prevToken)
		}
		if !prev.IsZero() && at.Sub(prev) != time.Second {
			t.Errorf("slots lost between %s and %s", prev.Format("150405"), at.Format("150405"))
		}
		prev, prevToken = at, s.Token

		v, ok := c.get(stateKey("tick", id))
		if want := "done:" + s.Replica + ":1:"; !ok || !strings.HasPrefix(v, want) {
			t.Errorf("slot %s: state %q (exists %v), want %s<ms>", id, v, ok, want)
		}
		if n, _ := c.get(attemptsKey("tick", id)); n != "1" {
			t.Errorf("slot %s: attempts %q, want 1", id, n)
		}
		for _, k := range []string{stateKey("tick", id), attemptsKey("tick", id)} {
			if ttl := c.pttl(k); ttl <= 0 {
				t.Errorf("key %s: PTTL %v, want a TTL", k, ttl)
			}
		}
	}
	winners := map[string]int{}
	for _, e := range find(evs, "start", 0) {
		winners[e.Replica]++
	}
	t.Logf("%d slots; wins by replica: %v", len(ids), winners)
}

// A task that fails its first attempt of each slot and succeeds its second:
// every slot has attempt 1 failed, then attempt 2 succeeded inside the
// window (on any replica), and never a third attempt.
func TestFailedFirstAttemptRetried(t *testing.T) {
	t.Parallel()
	const window = 2 * time.Second
	c := newCluster(t)
	c.start(3, "1s", `lease = "2s"
max_attempts = 3
timeout = "1m"
catchup = "none"`,
		c.execTask("flaky", "@every 2s",
			`rec start; if [ "$SLOTD_ATTEMPT" = 1 ]; then rec fail; exit 1; fi; rec end`, ""))

	c.ledger.await("3 slots retried to success", 40*time.Second, func(evs []event) bool {
		return slotsWith(evs, "end", 1) >= 3
	})
	stopAt := time.Now()
	c.stopAll()
	evs := c.ledger.read()
	slots := bySlot(evs)

	full, byPeer := 0, 0
	for _, id := range sortedSlots(slots) {
		es := slots[id]
		at := slotTime(t, id)
		// A slot whose window closed before the stop must be settled; a
		// later one may have been cut short by the shutdown.
		settled := !at.Add(window).After(stopAt) || len(find(es, "end", 0)) > 0
		a1, a2 := find(es, "start", 1), find(es, "start", 2)
		if len(a1) != 1 || len(a2) > 1 || len(find(es, "start", 0)) != len(a1)+len(a2) {
			t.Errorf("slot %s: want attempt 1 once and at most attempt 2 once:\n%s", id, dump(es))
			continue
		}
		if len(find(es, "fail", 1)) != 1 || len(find(es, "end", 1)) != 0 {
			t.Errorf("slot %s: attempt 1 did not fail as scripted:\n%s", id, dump(es))
		}
		if len(a2) == 0 {
			if settled {
				t.Errorf("slot %s: attempt 1 failed and no retry followed inside the window:\n%s", id, dump(es))
			}
			continue
		}
		full++
		f, s2 := find(es, "fail", 1)[0], a2[0]
		if s2.At.Before(f.At) {
			t.Errorf("slot %s: attempt 2 started before attempt 1 failed:\n%s", id, dump(es))
		}
		if !s2.At.Before(at.Add(window)) {
			t.Errorf("slot %s: attempt 2 started %v after the slot time, outside its %v window", id, s2.At.Sub(at), window)
		}
		if s2.Token <= a1[0].Token {
			t.Errorf("slot %s: attempt 2 token %d not above attempt 1's %d", id, s2.Token, a1[0].Token)
		}
		if s2.Replica != a1[0].Replica {
			byPeer++
		}
		ends := find(es, "end", 2)
		if len(ends) != 1 {
			if settled {
				t.Errorf("slot %s: attempt 2 did not end:\n%s", id, dump(es))
			}
			continue
		}
		if v, _ := c.get(stateKey("flaky", id)); !strings.HasPrefix(v, "done:"+s2.Replica+":2:") {
			t.Errorf("slot %s: state %q, want done by %s as attempt 2", id, v, s2.Replica)
		}
		if n, _ := c.get(attemptsKey("flaky", id)); n != "2" {
			t.Errorf("slot %s: attempts %q, want 2", id, n)
		}
	}
	if full < 3 {
		t.Errorf("%d slots retried, want >= 3:\n%s", full, dump(evs))
	}
	t.Logf("%d slots retried, %d of them by another replica than attempt 1's", full, byPeer)
}

// A task that always fails stops at max_attempts: each slot whose window
// passed has exactly attempts 1, 2 and 3, its counter reads 3, and its
// state key is gone (released, not done).
func TestAlwaysFailsStopsAtMaxAttempts(t *testing.T) {
	t.Parallel()
	const window = 3 * time.Second
	c := newCluster(t)
	c.start(3, "1s", `lease = "2s"
max_attempts = 3
timeout = "1m"
catchup = "none"`,
		c.execTask("broken", "@every 3s", `rec start; rec fail; exit 1`, ""))

	c.ledger.await("2 slots with 3 failed attempts and their windows over", 40*time.Second, func(evs []event) bool {
		n := 0
		for id, es := range bySlot(evs) {
			if len(find(es, "fail", 0)) >= 3 && time.Now().After(slotTime(t, id).Add(window)) {
				n++
			}
		}
		return n >= 2
	})
	stopAt := time.Now()
	c.stopAll()
	evs := c.ledger.read()
	slots := bySlot(evs)

	full := 0
	for _, id := range sortedSlots(slots) {
		es := slots[id]
		settled := !slotTime(t, id).Add(window).After(stopAt)
		starts := find(es, "start", 0)
		seen := map[int]int{}
		for _, s := range starts {
			seen[s.Attempt]++
			if s.Attempt < 1 || s.Attempt > 3 || seen[s.Attempt] > 1 {
				t.Errorf("slot %s: attempt %d out of bounds or repeated (max_attempts 3):\n%s", id, s.Attempt, dump(es))
			}
		}
		if len(find(es, "end", 0)) != 0 {
			t.Errorf("slot %s: an attempt succeeded, yet the task always fails:\n%s", id, dump(es))
		}
		if !settled {
			continue
		}
		full++
		if len(starts) != 3 || len(find(es, "fail", 0)) != 3 {
			t.Errorf("slot %s: want exactly 3 failed attempts:\n%s", id, dump(es))
		}
		if n, _ := c.get(attemptsKey("broken", id)); n != "3" {
			t.Errorf("slot %s: GET %s = %q, want 3", id, attemptsKey("broken", id), n)
		}
		if ttl := c.pttl(attemptsKey("broken", id)); ttl <= 0 {
			t.Errorf("slot %s: attempts key PTTL %v, want a TTL", id, ttl)
		}
		if v, ok := c.get(stateKey("broken", id)); ok {
			t.Errorf("slot %s: state %q left behind, want none after the failed attempts released it", id, v)
		}
	}
	if full < 2 {
		t.Errorf("%d slots fully observed, want >= 2:\n%s", full, dump(evs))
	}
}

// kill -9 of the replica running a slot: its lease runs out, and another
// replica then runs attempt 2 of the same slot to success — not while the
// dead holder's lease still held, and no later than lease + 3s after the
// kill.
func TestKill9WinnerPeerCompletes(t *testing.T) {
	t.Parallel()
	const lease = 2 * time.Second
	c := newCluster(t)
	c.start(3, "1s", `lease = "2s"
max_attempts = 3
timeout = "1m"
catchup = "none"`,
		c.execTask("slow", "@every 10s", `rec start; sleep 3; rec end`, ""))

	evs := c.ledger.await("a first attempt", 30*time.Second, func(evs []event) bool {
		return len(find(evs, "start", 1)) > 0
	})
	first := find(evs, "start", 1)[0]
	slot := first.Slot
	if v, _ := c.get(stateKey("slow", slot)); v != "run:"+first.Replica+":1" {
		t.Fatalf("slot %s: state %q while attempt 1 runs, want run:%s:1", slot, v, first.Replica)
	}
	if n, _ := c.get(attemptsKey("slow", slot)); n != "1" {
		t.Fatalf("slot %s: attempts %q while attempt 1 runs, want 1", slot, n)
	}

	winner := c.replica(first.Replica)
	killAt := time.Now()
	winner.Kill9()
	// What is left of the dead holder's lease bounds attempt 2 from below.
	ttlAt := time.Now()
	left := c.pttl(stateKey("slow", slot))
	expiry := ttlAt.Add(left)
	t.Logf("killed %s %v into slot %s; lease left %v", winner.name, killAt.Sub(slotTime(t, slot)), slot, left)
	if left <= 0 || left > lease {
		t.Errorf("slot %s: PTTL %v of the dead holder's lock, want within (0, %v]", slot, left, lease)
	}
	// The kernel kills the task's shell with its daemon (Pdeathsig), so
	// attempt 1 never writes its end line: checked below, after attempt 2.
	evs = c.ledger.await("attempt 2 of slot "+slot, lease+10*time.Second, func(evs []event) bool {
		return len(find(bySlot(evs)[slot], "start", 2)) > 0
	})
	second := find(bySlot(evs)[slot], "start", 2)[0]
	t.Logf("attempt 2 on %s, %v after the kill", second.Replica, second.At.Sub(killAt))
	if second.Replica == winner.name {
		t.Errorf("attempt 2 ran on the killed replica %s", second.Replica)
	}
	if left > 0 && second.At.Before(expiry.Add(-20*time.Millisecond)) {
		t.Errorf("attempt 2 started %v before the dead holder's lease ran out", expiry.Sub(second.At))
	}
	if second.At.Before(killAt.Add(lease * 2 / 3).Add(-20 * time.Millisecond)) {
		t.Errorf("attempt 2 started %v after the kill, before even 2/3 of the lease", second.At.Sub(killAt))
	}
	if late := second.At.Sub(killAt); late > lease+3*time.Second {
		t.Errorf("attempt 2 started %v after the kill, want within lease + 3s = %v", late, lease+3*time.Second)
	}
	if second.Token <= first.Token {
		t.Errorf("attempt 2 token %d not above attempt 1's %d", second.Token, first.Token)
	}

	evs = c.ledger.await("attempt 2 of slot "+slot+" to end", 15*time.Second, func(evs []event) bool {
		return len(find(bySlot(evs)[slot], "end", 2)) > 0
	})
	es := bySlot(evs)[slot]
	if len(find(es, "start", 0)) != 2 || len(find(es, "end", 1)) != 0 {
		t.Errorf("slot %s: want attempt 1 (killed, no end) and attempt 2 only:\n%s", slot, dump(es))
	}
	if n, _ := c.get(attemptsKey("slow", slot)); n != "2" {
		t.Errorf("slot %s: attempts %q after the takeover, want 2", slot, n)
	}
	// The daemon marks the slot done once the task has exited.
	done := "done:" + second.Replica + ":2:"
	c.awaitKey(stateKey("slow", slot), "to read "+done+"<ms>", 5*time.Second, func(v string, _ bool) bool {
		return strings.HasPrefix(v, done)
	})
}

// SIGTERM to the replica running a slot: after shutdown_grace it cancels
// the task (SIGTERM to the task), releases the slot and exits 0; another
// replica runs attempt 2 at once instead of waiting out the 10s lease, and
// only after attempt 1 has ended.
func TestSigtermWinnerHandsOver(t *testing.T) {
	t.Parallel()
	const grace = 500 * time.Millisecond
	c := newCluster(t)
	c.start(3, "500ms", `lease = "10s"
max_attempts = 3
timeout = "1m"
catchup = "none"`,
		c.execTask("long", "@every 10s", `trap 'rec term; exit 143' TERM; rec start; sleep 30; rec end`, ""))

	evs := c.ledger.await("a first attempt", 30*time.Second, func(evs []event) bool {
		return len(find(evs, "start", 1)) > 0
	})
	first := find(evs, "start", 1)[0]
	slot := first.Slot
	winner := c.replica(first.Replica)

	sigAt := time.Now()
	winner.Signal(syscall.SIGTERM)
	st := winner.Wait(10 * time.Second)
	exited := time.Since(sigAt)
	if st.ExitCode() != 0 {
		t.Errorf("replica %s: exit status %v after SIGTERM, want 0", winner.name, st)
	}
	if exited > 5*time.Second {
		t.Errorf("replica %s took %v to exit after SIGTERM (shutdown_grace %v, exec grace 1s)", winner.name, exited, grace)
	}

	evs = c.ledger.await("attempt 2 of slot "+slot, 10*time.Second, func(evs []event) bool {
		return len(find(bySlot(evs)[slot], "start", 2)) > 0
	})
	es := bySlot(evs)[slot]
	second := find(es, "start", 2)[0]
	t.Logf("%s exited %v after SIGTERM; attempt 2 on %s %v after it", winner.name, exited, second.Replica, second.At.Sub(sigAt))
	if second.Replica == winner.name {
		t.Errorf("attempt 2 ran on the stopping replica %s", second.Replica)
	}
	if d := second.At.Sub(sigAt); d > 4*time.Second {
		t.Errorf("attempt 2 started %v after the SIGTERM, want within 4s (a handover, not the 10s lease running out)", d)
	}
	if second.At.Before(sigAt.Add(grace - 20*time.Millisecond)) {
		t.Errorf("attempt 2 started %v after the SIGTERM, within the shutdown_grace %v of attempt 1", second.At.Sub(sigAt), grace)
	}
	terms := find(es, "term", 1)
	switch {
	case len(terms) != 1:
		t.Errorf("slot %s: attempt 1 did not record its SIGTERM:\n%s", slot, dump(es))
	case second.At.Before(terms[0].At):
		t.Errorf("slot %s: attempt 2 started before attempt 1 ended:\n%s", slot, dump(es))
	case terms[0].At.Before(sigAt.Add(grace - 20*time.Millisecond)):
		t.Errorf("attempt 1 was cancelled %v after the SIGTERM, before shutdown_grace %v", terms[0].At.Sub(sigAt), grace)
	}
	if len(find(es, "end", 1)) != 0 {
		t.Errorf("slot %s: attempt 1 ran to its end:\n%s", slot, dump(es))
	}
	if second.Token <= first.Token {
		t.Errorf("attempt 2 token %d not above attempt 1's %d", second.Token, first.Token)
	}
	if v, _ := c.get(stateKey("long", slot)); v != "run:"+second.Replica+":2" {
		t.Errorf("slot %s: state %q, want run:%s:2", slot, v, second.Replica)
	}
	if n, _ := c.get(attemptsKey("long", slot)); n != "2" {
		t.Errorf("slot %s: attempts %q, want 2", slot, n)
	}
}
