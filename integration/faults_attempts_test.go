package integration

import (
	"testing"
	"time"
)

// Scenario 10. In one daemon fleet: a task that always times out
// (timeout = "1s", sleeps 5s) and one that always fails. Each slot of either
// stops at max_attempts = 3 — attempts 1, 2, 3, each once, the counter at 3,
// the state key released — the timed-out attempts are cut at ~1s, and the
// daemons keep running: later slots of both, and a healthy task beside
// them, go on.
//
// Not covered: a panicking task. Only a Go plugin can panic, and no plugin
// in the binaries here panics; scheduler's runTask recovers panics (unit
// tests of package scheduler are the place for that case).
func TestTimeoutsAndFailuresStopAtCap(t *testing.T) {
	t.Parallel()
	const window = 6 * time.Second
	c := newCluster(t)
	c.start(2, "1s", `lease = "2s"
max_attempts = 3
timeout = "1m"
catchup = "none"`,
		c.execTask("slowpoke", "@every 6s", `trap 'rec term; exit 143' TERM; rec start; sleep 5 & wait; rec end`, `timeout = "1s"`),
		c.execTask("broken", "@every 6s", `rec start; rec fail; exit 1`, ""),
		c.execTask("healthy", "@every 2s", `rec start; rec end`, ""))

	settled := func(evs []event, task string) []string {
		var ids []string
		for id, es := range bySlot(byTask(evs, task)) {
			if time.Now().After(slotTime(t, id).Add(window)) && len(find(es, "start", 0)) > 0 {
				ids = append(ids, id)
			}
		}
		return ids
	}
	var lastClose time.Time
	c.ledger.await("2 settled slots of slowpoke and broken, then a healthy run", 45*time.Second, func(evs []event) bool {
		if len(settled(evs, "slowpoke")) < 2 || len(settled(evs, "broken")) < 2 {
			return false
		}
		if lastClose.IsZero() {
			lastClose = time.Now()
		}
		for _, e := range find(byTask(evs, "healthy"), "end", 0) {
			if e.At.After(lastClose) {
				return true
			}
		}
		return false
	})
	evs := c.ledger.read()
	for _, task := range []string{"slowpoke", "broken"} {
		slots := bySlot(byTask(evs, task))
		for _, id := range settled(evs, task) {
			es := slots[id]
			starts := find(es, "start", 0)
			// The daemons' own "attempt started" lines count the attempts:
			// a slowpoke shell killed at its 1 s timeout before its first
			// line ran (a loaded machine can take that long to start one)
			// leaves no start in the ledger.
			if n := c.attemptsStarted(task, id); n != 3 || len(starts) > 3 || (task == "broken" && len(starts) != 3) {
				t.Errorf("%s slot %s: %d attempts started by the daemons, %d in the ledger, want 3:\n%s", task, id, n, len(starts), dump(es))
			}
			for i, s := range starts {
				if i > 0 && s.Attempt <= starts[i-1].Attempt {
					t.Errorf("%s slot %s: attempt %d after attempt %d:\n%s", task, id, s.Attempt, starts[i-1].Attempt, dump(es))
				}
				if task == "slowpoke" && i > 0 {
					// Each attempt ran until its 1s timeout, not its 5s sleep,
					// and the next started only after it was stopped. (The
					// gap between starts alone is no measure: the start line
					// comes after the supervisor and the shell have started,
					// which under load can take a few hundred ms.)
					gap := s.At.Sub(starts[i-1].At)
					if gap > 4*time.Second {
						t.Errorf("slowpoke slot %s: attempt %d started %v after attempt %d, want about the 1s timeout", id, s.Attempt, gap, starts[i-1].Attempt)
					}
					terms := find(es, "term", starts[i-1].Attempt)
					if len(terms) != 1 || s.At.Before(terms[0].At) {
						t.Errorf("slowpoke slot %s: attempt %d started before attempt %d was stopped (SIGTERM at its timeout):\n%s", id, s.Attempt, starts[i-1].Attempt, dump(es))
					}
				}
			}
			if n := len(find(es, "end", 0)); n != 0 {
				t.Errorf("%s slot %s: %d attempts ended successfully:\n%s", task, id, n, dump(es))
			}
			if n, _ := c.get(attemptsKey(task, id)); n != "3" {
				t.Errorf("%s slot %s: attempts %q, want 3", task, id, n)
			}
			if v, ok := c.get(stateKey(task, id)); ok {
				t.Errorf("%s slot %s: state %q, want none (released)", task, id, v)
			}
		}
	}
	timeouts, exhausted := 0, 0
	for _, r := range c.reps {
		if !r.running() {
			t.Errorf("replica %s exited", r.name)
		}
		for _, rec := range r.records() {
			switch {
			case rec.msg() == "attempt failed" && rec.str("task") == "slowpoke":
				if rec.str("outcome") != "timeout" {
					t.Errorf("replica %s: slowpoke attempt failed with outcome %q, want timeout", r.name, rec.str("outcome"))
				}
				timeouts++
			case rec.msg() == "slot exhausted: its last allowed attempt failed":
				exhausted++
			}
		}
	}
	t.Logf("%d slowpoke timeouts, %d slots exhausted, %d healthy slots", timeouts, exhausted, slotsWith(byTask(evs, "healthy"), "end", 1))
	if exhausted < 4 {
		t.Errorf("%d slots logged exhausted, want >= 4", exhausted)
	}
	c.stopAll()
}

// byTask keeps the events of one task.
func byTask(evs []event, task string) []event {
	var out []event
	for _, e := range evs {
		if e.Task == task {
			out = append(out, e)
		}
	}
	return out
}

// attemptsStarted counts the distinct attempts of a task's slot that the
// replicas logged as started.
func (c *cluster) attemptsStarted(task, id string) int {
	seen := map[float64]bool{}
	for _, r := range c.reps {
		for _, rec := range r.records() {
			if rec.msg() == "attempt started" && rec.str("task") == task && rec.str("slot") == id {
				seen[rec.num("attempt")] = true
			}
		}
	}
	return len(seen)
}
