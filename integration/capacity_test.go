package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// Three slotd processes with [daemon] max_running = 1 share an hourly
// long task and a one-second tick. The replica running the long task
// claims no tick; when it is killed -9, a peer takes the long task over
// after its lease and from then on claims no tick either, leaving every
// tick to the third. No replica ever runs two attempts at once, and no
// tick runs twice.
func TestMaxRunningAcrossProcessesAndKill9(t *testing.T) {
	if now := time.Now(); now.Minute() == 59 {
		// The long task's slot is the current hour's: leave it room.
		time.Sleep(time.Until(now.Truncate(time.Hour).Add(time.Hour + time.Second)))
	}
	c := newCluster(t)
	defaults := `lease = "2s"
max_attempts = 3
timeout = "1m"
catchup = "latest"`
	tasks := []string{
		c.execTask("long", "@every 1h", `rec start; sleep 15; rec end`, ""),
		c.execTask("tick", "@every 1s", `rec start; rec end`, `catchup = "none"`),
	}
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("r%d", i)
		cfg := config(name, c.srv.URL(), "2s", defaults, tasks...)
		cfg = strings.Replace(cfg, "[daemon]\n", "[daemon]\nmax_running = 1\n", 1)
		c.reps = append(c.reps, startReplica(t, name, cfg))
	}

	evs := c.ledger.await("the long task to start", 30*time.Second, func(evs []event) bool {
		return len(find(onTask(evs, "long"), "start", 1)) > 0
	})
	first := find(onTask(evs, "long"), "start", 1)[0]
	c.ledger.await("three ticks after the long task started", 20*time.Second, func(evs []event) bool {
		return len(endsAfter(onTask(evs, "tick"), first.At)) >= 3
	})
	victim := c.replica(first.Replica)
	victim.Kill9()
	killAt := time.Now()

	evs = c.ledger.await("a peer's attempt 2 of the long task", 20*time.Second, func(evs []event) bool {
		return len(find(onTask(evs, "long"), "start", 2)) > 0
	})
	second := find(onTask(evs, "long"), "start", 2)[0]
	t.Logf("long: attempt 1 on %s, killed; attempt 2 on %s %v after the kill", first.Replica, second.Replica, second.At.Sub(killAt))
	if second.Replica == first.Replica {
		t.Fatalf("attempt 2 ran on the killed replica")
	}
	evs = c.ledger.await("three ticks after the takeover", 20*time.Second, func(evs []event) bool {
		return len(endsAfter(onTask(evs, "tick"), second.At)) >= 3
	})
	c.stopAll()
	evs = c.ledger.read()

	// Each replica's attempts, as intervals from start to end (the killed
	// one's open until the kill, the rest until the end of the test).
	type span struct {
		task, slot string
		from, to   time.Time
	}
	ends := map[string]time.Time{}
	for _, e := range find(evs, "end", 0) {
		ends[e.Task+" "+e.Slot+" "+fmt.Sprint(e.Attempt)] = e.At
	}
	byReplica := map[string][]span{}
	for _, e := range find(evs, "start", 0) {
		to, ok := ends[e.Task+" "+e.Slot+" "+fmt.Sprint(e.Attempt)]
		if !ok {
			to = time.Now()
			if e.Replica == victim.name {
				to = killAt
			}
		}
		byReplica[e.Replica] = append(byReplica[e.Replica], span{e.Task, e.Slot, e.At, to})
	}
	for rep, spans := range byReplica {
		for i, a := range spans {
			for _, b := range spans[i+1:] {
				if a.from.Before(b.to) && b.from.Before(a.to) {
					t.Errorf("replica %s ran %s %s and %s %s at once (max_running = 1)", rep, a.task, a.slot, b.task, b.slot)
				}
			}
		}
	}
	for slot, es := range bySlot(onTask(evs, "tick")) {
		if n := len(find(es, "start", 0)); n != 1 {
			t.Errorf("tick slot %s started %d times:\n%s", slot, n, dump(es))
		}
	}
	var third string
	for _, r := range c.reps {
		if r.name != first.Replica && r.name != second.Replica {
			third = r.name
		}
	}
	for _, e := range find(onTask(evs, "tick"), "start", 0) {
		if e.At.After(second.At) && e.Replica != third {
			t.Errorf("tick %s ran on %s after the takeover; only %s had room", e.Slot, e.Replica, third)
		}
	}
}

func onTask(evs []event, task string) []event {
	var out []event
	for _, e := range evs {
		if e.Task == task {
			out = append(out, e)
		}
	}
	return out
}

func endsAfter(evs []event, at time.Time) []event {
	var out []event
	for _, e := range find(evs, "end", 0) {
		if e.At.After(at) {
			out = append(out, e)
		}
	}
	return out
}
