package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/slotd/slotd/lock"
)

// Scenario 7a. Redis is down (the server killed) from just before a slot's
// fire time until 2s into its window, then back, empty. Every replica's
// claim fails meanwhile and runs nothing (fail closed); once Redis answers
// again the slot runs exactly once, inside its window, never before its
// slot time.
func TestRedisDownAtFireTimeBackInWindow(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	s := newSink(t)
	spec, at := oneShot(4 * time.Second)
	c.start(3, "1s", `lease = "2s"
max_attempts = 3
timeout = "1m"
catchup = "latest"`,
		c.sinkTask(s, "outage", spec, sinkScript("0.2"), `deadline = "15s"`))
	c.awaitStarted(10 * time.Second)
	if time.Until(at) < 500*time.Millisecond {
		t.Fatalf("replicas took too long to start: the slot at %s is %v away", at.Format("15:04:05"), time.Until(at))
	}
	time.Sleep(time.Until(at.Add(-500 * time.Millisecond)))
	c.srv.Stop()
	downAt := time.Now()
	time.Sleep(time.Until(at.Add(2 * time.Second)))
	// Redis accepts connections as soon as it listens, before Restart's own
	// PING confirms it: a replica may start the slot a little before upAt,
	// never before the restart began.
	restartAt := time.Now()
	c.srv.Restart()
	upAt := time.Now()
	t.Logf("redis down from %v before the slot time to %v after it", at.Sub(downAt), upAt.Sub(at))

	evs := c.ledger.await("the slot to end", 15*time.Second, func(evs []event) bool { return len(find(evs, "end", 0)) > 0 })
	end := find(evs, "end", 0)[0]
	slot := end.Slot
	done := "done:" + end.Replica + ":"
	c.awaitKey(stateKey("outage", slot), "to read "+done+"...", 5*time.Second, func(v string, _ bool) bool {
		return strings.HasPrefix(v, done)
	})
	starts := find(evs, "start", 0)
	if len(starts) != 1 || len(find(evs, "end", 0)) != 1 {
		t.Errorf("want exactly one run:\n%s", dump(evs))
	}
	st := starts[0]
	t.Logf("slot ran on %s %v after Redis came back (%v after its slot time)", st.Replica, st.At.Sub(upAt), st.At.Sub(at))
	if st.At.Before(restartAt) {
		t.Errorf("the slot started %v before Redis was restarted", restartAt.Sub(st.At))
	}
	if !st.At.Before(at.Add(15 * time.Second)) {
		t.Errorf("the slot started %v after its slot time, past its 15s window", st.At.Sub(at))
	}
	if st.Token != lock.Token(at, 1) {
		t.Errorf("token %d, want %d (attempt 1: no claim reached Redis before)", st.Token, lock.Token(at, 1))
	}
	if commits := s.results("commit", slot, true); len(commits) != 1 {
		t.Errorf("%d accepted results, want 1:\n%s", len(commits), dumpWrites(s.all()))
	}
	failed := 0
	for _, r := range c.reps {
		for _, rec := range r.records() {
			if rec.msg() == "claim failed; not running, will retry" && rec.str("task") == "outage" {
				failed++
			}
		}
	}
	if failed == 0 {
		t.Errorf("no replica logged a failed claim while Redis was down")
	}
	t.Logf("%d failed claims logged by 3 replicas during the outage", failed)
}

// Scenario 7b. Redis is down from before a slot's fire time until after its
// window (3s) has closed. Nothing runs, not even late once Redis is back;
// every replica logs the slot as missed and counts it in
// slotd_slots_missed_total.
func TestRedisDownPastWindowNothingRunsLate(t *testing.T) {
	t.Parallel()
	const window = 3 * time.Second
	c := newCluster(t)
	spec, at := oneShot(4 * time.Second)
	c.start(2, "1s", `lease = "2s"
max_attempts = 3
timeout = "1m"
catchup = "latest"`,
		c.execTask("missed", spec, `rec start; rec end`, `deadline = "3s"`))
	c.awaitStarted(10 * time.Second)
	for _, r := range c.reps {
		r.httpAddr(5 * time.Second) // learn the addresses while all is well
	}
	if time.Until(at) < 500*time.Millisecond {
		t.Fatalf("replicas took too long to start: the slot at %s is %v away", at.Format("15:04:05"), time.Until(at))
	}
	time.Sleep(time.Until(at.Add(-500 * time.Millisecond)))
	c.srv.Stop()
	time.Sleep(time.Until(at.Add(window + time.Second)))
	c.srv.Restart()
	upAt := time.Now()

	slot := at.Format("20060102") // a daily schedule: slot ids by day
	for _, r := range c.reps {
		rec := r.awaitLog("the missed slot", 5*time.Second, func(rec logRec) bool {
			return rec.msg() == "slot window closed without a success" && rec.str("task") == "missed" && rec.str("slot") == slot
		})
		t.Logf("replica %s logged the slot missed %v after its slot time", r.name, rec.time().Sub(at))
	}
	// Give a late run every chance to show: the store answers again, and the
	// replicas recheck it every second while it was down.
	time.Sleep(2 * time.Second)
	if evs := c.ledger.read(); len(evs) != 0 {
		t.Errorf("a slot ran although Redis was down for its whole window:\n%s", dump(evs))
	}
	for _, k := range []string{stateKey("missed", slot), attemptsKey("missed", slot)} {
		if v, ok := c.get(k); ok {
			t.Errorf("key %s = %q written after the window closed", k, v)
		}
	}
	for _, r := range c.reps {
		if n := r.metric(t, `slotd_slots_missed_total{task="missed"}`); n != 1 {
			t.Errorf("replica %s: slotd_slots_missed_total{task=\"missed\"} = %v, want 1", r.name, n)
		}
		if up := r.metric(t, "slotd_redis_up"); up != 1 {
			t.Logf("replica %s: slotd_redis_up %v %v after Redis came back", r.name, up, time.Since(upAt))
		}
		if !r.running() {
			t.Errorf("replica %s exited", r.name)
		}
	}
}
