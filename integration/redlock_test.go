package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/redistest"
)

// Three replicas in Redlock mode on five independent masters. With two
// masters killed every slot still runs exactly once, as attempt 1, with
// growing fencing tokens, and ends done on the three left. With a third
// killed no quorum forms: nothing runs and no attempt is counted on the
// two left. Restarted (empty), the masters form a quorum again and slots
// run again.
func TestRedlockModeQuorum(t *testing.T) {
	var srvs []*redistest.Server
	var urls []string
	for range 5 {
		s := redistest.Start(t)
		srvs = append(srvs, s)
		urls = append(urls, s.URL())
	}
	c := newLedgerOnly(t)
	keys := "url = \"\"\nredlock = " + tomlList(urls)
	// A 3s window: a claim slowed by the dead masters' refusals still
	// lands in its slot's window, so that no slot is missed.
	const window = 3 * time.Second
	task := c.execTask("tick", "@every 1s", `rec start; sleep 0.2; rec end`, `deadline = "3s"`)
	const defaults = "lease = \"2s\"\nmax_attempts = 3\ntimeout = \"1m\"\ncatchup = \"none\""
	var cfgPath string
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("r%d", i)
		r := startReplica(t, name, modesConfig(name, keys, defaults, task))
		c.reps = append(c.reps, r)
		cfgPath = strings.TrimSuffix(r.logPath, ".log") + ".toml"
	}
	c.ledger.await("2 completed slots on 5 masters", 60*time.Second, func(evs []event) bool {
		return slotsWith(evs, "end", 1) >= 2
	})

	// Two of five down.
	srvs[0].Stop()
	srvs[3].Stop()
	twoDown := time.Now()
	c.ledger.await("5 slots fired after 2 masters died completed", 60*time.Second, func(evs []event) bool {
		n := 0
		for id, es := range bySlot(evs) {
			if slotTime(t, id).After(twoDown) && len(find(es, "end", 0)) > 0 {
				n++
			}
		}
		return n >= 5
	})

	// Three of five down: nothing may run.
	srvs[1].Stop()
	threeDown := time.Now()
	t.Logf("2 masters killed at %s, the third at %s", twoDown.Format("15:04:05.000"), threeDown.Format("15:04:05.000"))
	// Slots whose windows opened after the third master died and closed
	// before the masters came back: every replica's claims of them fail.
	outage := map[string]bool{}
	awaitPoll(t, "3 slots refused for want of a quorum until their windows closed", 60*time.Second, func() int {
		for _, r := range c.reps {
			for _, rec := range r.records() {
				if rec.str("msg") == "claim failed; not running, will retry" && strings.Contains(rec.str("err"), "no quorum") {
					if id := rec.str("slot"); slotTime(t, id).After(threeDown) {
						outage[id] = true
					}
				}
			}
		}
		closed := 0
		for id := range outage {
			if time.Since(slotTime(t, id)) > window+time.Second {
				closed++
			}
		}
		return closed
	}, func(n int) bool { return n >= 3 }, func(n int) string { return fmt.Sprintf("%d slots", n) })
	restarted := time.Now()
	for id := range outage {
		if !slotTime(t, id).Add(window).Before(restarted) {
			delete(outage, id) // still open: it may run after the restart
		}
	}
	for _, i := range []int{0, 1, 3} {
		srvs[i].Restart() // empty: the windows of the slots they held are long closed
	}
	c.ledger.await("3 slots fired after the masters came back completed", 90*time.Second, func(evs []event) bool {
		n := 0
		for id, es := range bySlot(evs) {
			if slotTime(t, id).After(restarted) && len(find(es, "end", 0)) > 0 {
				n++
			}
		}
		return n >= 3
	})
	c.stopAll()

	slots := bySlot(c.ledger.read())
	// No claim storm: a replica claims a slot a few times (the first
	// claim, a wake-up, the backoff's retries while no quorum forms), not
	// without end; a grant given back must not wake watchers that would
	// grant and give back again.
	fired := int(time.Since(slotTime(t, sortedSlots(slots)[0])) / time.Second)
	for _, r := range c.reps {
		n := 0
		for _, rec := range r.records() {
			if m := rec.str("msg"); m == "slot settled" || m == "claim failed; not running, will retry" {
				n++
			}
		}
		if n > 20*fired {
			t.Errorf("replica %s logged %d claims for about %d slots: a claim storm", r.name, n, fired)
		}
		t.Logf("replica %s: %d claims logged (settled or failed) for about %d slots", r.name, n, fired)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var prevToken int64
	for _, id := range sortedSlots(slots) {
		es := slots[id]
		starts := find(es, "start", 0)
		if len(starts) != 1 || starts[0].Attempt != 1 {
			t.Errorf("slot %s: want one start, of attempt 1, got:\n%s", id, dump(es))
			continue
		}
		if starts[0].Token <= prevToken {
			t.Errorf("slot %s: token %d not above the previous slot's %d", id, starts[0].Token, prevToken)
		}
		prevToken = starts[0].Token
		if outage[id] {
			t.Errorf("slot %s ran while 3 of 5 masters were down:\n%s", id, dump(es))
		}
	}
	// Exactly once, with none missed, while two masters were down: every
	// slot from the first fired after they died to the last whose window
	// closed before the third did, done on the three masters left. (A slot
	// whose window the third kill cut short may or may not have run, but
	// at most once, as checked above.)
	first := twoDown.Truncate(time.Second).Add(time.Second)
	last := threeDown.Add(-window).Truncate(time.Second)
	for at := first; !at.After(last); at = at.Add(time.Second) {
		id := at.UTC().Format("20060102150405")
		if len(find(slots[id], "end", 1)) != 1 {
			var logs []string
			for _, r := range c.reps {
				for _, rec := range r.records() {
					if rec.str("slot") == id {
						logs = append(logs, fmt.Sprintf("  %s %s %s %s", r.name, rec.str("time"), rec.str("msg"), rec.str("err")))
					}
				}
			}
			t.Errorf("slot %s (2 of 5 masters down): want one completed attempt 1, got:\n%s\nthe replicas' log lines of it:\n%s",
				id, dump(slots[id]), strings.Join(logs, "\n"))
		}
		for _, i := range []int{2, 4} {
			if v := srvs[i].Client().Get(ctx, stateKey("tick", id)).Val(); !strings.HasPrefix(v, "done:") {
				t.Errorf("slot %s: master %d holds %q, want a done marker", id, i, v)
			}
		}
	}
	// Nothing counted during the outage on the two masters that stayed up.
	for id := range outage {
		for _, i := range []int{2, 4} {
			if v := srvs[i].Client().Get(ctx, attemptsKey("tick", id)).Val(); v != "" {
				t.Errorf("slot %s: master %d counted %s attempts while no quorum formed", id, i, v)
			}
		}
	}
	t.Logf("%d slots; %d refused while 3 of 5 masters were down", len(slots), len(outage))

	st := slotd(t, "status", "-config", cfgPath, "-json")
	if st.code != 0 || !strings.Contains(st.stdout, `"tick"`) || !strings.Contains(st.stdout, "done") {
		t.Errorf("slotd status in Redlock mode: exit %d\nstdout:\n%s\nstderr:\n%s", st.code, st.stdout, st.stderr)
	}
	hist := slotd(t, "history", "-config", cfgPath, "tick")
	if hist.code != 0 || !strings.Contains(hist.stdout, "success") {
		t.Errorf("slotd history in Redlock mode: exit %d\nstdout:\n%s\nstderr:\n%s", hist.code, hist.stdout, hist.stderr)
	}
}
