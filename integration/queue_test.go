package integration

// concurrency = "queue" across real daemons, and a daemon killed with
// SIGKILL while it holds the task's running record or its waiting record.
// Both records live in the store with a lease as their TTL, renewed only by
// a live daemon, so neither may outlive its holder by more than a lease.

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

const (
	queueTask  = "queued"
	queueLease = 2 * time.Second
	// waitingMsg is the log line of an attempt that starts waiting.
	waitingMsg = "waiting for the task's running slot to end (concurrency = queue)"
)

// queueCluster starts three replicas of a task that runs every 2 s with
// concurrency = "queue", a 30 s window and a 2 s lease. Each run holds until
// the test opens its slot's gate (or every gate) and records its start and
// its end in the ledger.
func queueCluster(t *testing.T, maxAttempts string) (*cluster, func(slot string)) {
	c := newCluster(t)
	gate := t.TempDir()
	script := `rec start
until [ -e '` + gate + `/'"$SLOTD_SLOT" ] || [ -e '` + gate + `/all' ]; do sleep 0.05; done
rec end`
	c.start(3, "1s", `lease = "2s"
max_attempts = `+maxAttempts+`
timeout = "1m"
catchup = "latest"`,
		c.execTask(queueTask, "@every 2s", script, `concurrency = "queue"
deadline = "30s"`))
	open := func(slot string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(gate, slot), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { open("all") })
	return c, open
}

// running returns the newest run that started and has not ended.
func running(evs []event) (event, bool) {
	for i := len(evs) - 1; i >= 0; i-- {
		e := evs[i]
		if e.Kind == "start" && len(find(bySlot(evs)[e.Slot], "end", e.Attempt)) == 0 {
			return e, true
		}
	}
	return event{}, false
}

// waiter is a slot waiting for the task's running one, as a replica logs it.
type waiter struct {
	rep  *replica
	slot string
	at   time.Time
}

// waiters lists the waits logged after slot (slot ids sort as their times).
func (c *cluster) waiters(after string) []waiter {
	var out []waiter
	for _, r := range c.reps {
		for _, rec := range r.records() {
			if rec.msg() == waitingMsg && rec.str("task") == queueTask && rec.str("slot") > after {
				out = append(out, waiter{rep: r, slot: rec.str("slot"), at: rec.time()})
			}
		}
	}
	return out
}

// holderAndWaiter lets runs through one by one until the running slot's
// holder and the slot waiting for it are on two different replicas, and
// returns the running slot and the waiter.
func holderAndWaiter(t *testing.T, c *cluster, open func(string)) (event, waiter) {
	t.Helper()
	for range 8 {
		evs := c.ledger.await("a running slot", 15*time.Second, func(evs []event) bool {
			_, ok := running(evs)
			return ok
		})
		cur, _ := running(evs)
		ws := awaitPoll(t, "a slot waiting for "+cur.Slot, 10*time.Second,
			func() []waiter { return c.waiters(cur.Slot) },
			func(ws []waiter) bool { return len(ws) > 0 },
			func([]waiter) string { return "no replica logged " + waitingMsg })
		if len(ws) != 1 {
			t.Fatalf("%d slots wait for %s, want 1: %+v", len(ws), cur.Slot, ws)
		}
		if ws[0].rep.name != cur.Replica {
			return cur, ws[0]
		}
		t.Logf("slot %s waits on %s, the holder of %s: let that run end", ws[0].slot, cur.Replica, cur.Slot)
		open(cur.Slot)
		c.ledger.await("slot "+cur.Slot+" to end", 10*time.Second, func(evs []event) bool {
			return len(find(bySlot(evs)[cur.Slot], "end", 0)) > 0
		})
	}
	t.Fatal("the waiter stayed on the holder's replica for 8 slots in a row")
	return event{}, waiter{}
}

// checkSerial fails t if two runs of the task overlapped: each run must
// have ended (or been killed, at killed[slot]) before the next started, and
// no slot ran twice.
func checkSerial(t *testing.T, evs []event, killed map[string]time.Time) {
	t.Helper()
	starts := find(evs, "start", 0)
	slices.SortFunc(starts, func(a, b event) int { return a.At.Compare(b.At) })
	seen := map[string]bool{}
	for i, s := range starts {
		if seen[s.Slot] {
			t.Errorf("slot %s ran twice:\n%s", s.Slot, dump(bySlot(evs)[s.Slot]))
		}
		seen[s.Slot] = true
		if i == len(starts)-1 {
			break
		}
		end, ok := killed[s.Slot]
		if ends := find(bySlot(evs)[s.Slot], "end", s.Attempt); len(ends) > 0 {
			end, ok = ends[0].At, true
		}
		if next := starts[i+1]; !ok || next.At.Before(end) {
			t.Errorf("slot %s started while slot %s ran:\n%s", next.Slot, s.Slot, dump(evs))
		}
	}
}

func runningKey(task string) string { return "slotd:running:{" + task + "}" }

// The holder of the running slot is killed with SIGKILL while a slot on
// another replica waits for it: the waiter starts once the killed holder's
// running record runs out (at most a lease after the kill, plus a poll),
// never before, and never beside the killed run's processes. max_attempts
// = 1, so that the killed slot is not retried and the waiter alone wants
// the record.
func TestQueueHolderKilled(t *testing.T) {
	t.Parallel()
	c, open := queueCluster(t, "1")
	cur, w := holderAndWaiter(t, c, open)
	holder := c.replica(cur.Replica)
	if v, _ := c.get(runningKey(queueTask)); !strings.HasPrefix(v, cur.Slot+" ") {
		t.Fatalf("running record %q, want slot %s's", v, cur.Slot)
	}

	killed := time.Now()
	holder.Kill9()
	ttl := c.pttl(runningKey(queueTask))
	expiry := time.Now().Add(ttl)
	awaitGroupGone(t, cur.PGID, 5*time.Second)
	gone := time.Now()
	t.Logf("killed %s holding slot %s; its running record had %v left; its task's group gone %v after the kill; slot %s waits on %s",
		holder.name, cur.Slot, ttl, gone.Sub(killed), w.slot, w.rep.name)
	if ttl <= 0 || ttl > queueLease {
		t.Errorf("running record TTL after the kill %v, want within (0, %v]", ttl, queueLease)
	}

	evs := c.ledger.await("the waiting slot "+w.slot+" to start", queueLease+5*time.Second, func(evs []event) bool {
		return len(find(bySlot(evs)[w.slot], "start", 0)) > 0
	})
	started := find(bySlot(evs)[w.slot], "start", 0)[0]
	t.Logf("waiting slot %s started on %s %v after the kill, %v after the running record ran out",
		w.slot, started.Replica, started.At.Sub(killed), started.At.Sub(expiry))
	if started.Replica != w.rep.name {
		t.Errorf("slot %s started on %s, want its waiter %s", w.slot, started.Replica, w.rep.name)
	}
	if started.At.Before(expiry.Add(-50 * time.Millisecond)) {
		t.Errorf("slot %s started %v before the killed holder's running record ran out", w.slot, expiry.Sub(started.At))
	}
	if !started.At.After(gone) {
		t.Errorf("slot %s started before the killed run's processes were gone", w.slot)
	}
	if d := started.At.Sub(killed); d > queueLease+time.Second {
		t.Errorf("slot %s started %v after the kill, want within the lease (%v) and a poll", w.slot, d, queueLease)
	}

	open("all")
	evs = c.ledger.await("a run after the waiter's", 10*time.Second, func(evs []event) bool {
		return len(find(evs, "end", 0)) > 0 && find(evs, "start", 0)[len(find(evs, "start", 0))-1].At.After(started.At)
	})
	if n := len(find(bySlot(evs)[cur.Slot], "end", 0)); n != 0 {
		t.Errorf("the killed slot %s ended %d times", cur.Slot, n)
	}
	checkSerial(t, evs, map[string]time.Time{cur.Slot: killed})
}

// The replica holding the task's waiting record is killed with SIGKILL:
// the record runs out with its lease and a later slot (or the killed
// slot's own retry, max_attempts = 2) waits then and starts right after
// the running slot ends; no slot runs twice, no two runs overlap.
func TestQueueWaiterKilled(t *testing.T) {
	t.Parallel()
	c, open := queueCluster(t, "2")
	cur, w := holderAndWaiter(t, c, open)
	wkey := runningKey(queueTask + "~waiting")
	if v, _ := c.get(wkey); !strings.HasPrefix(v, w.slot+" ") {
		t.Fatalf("waiting record %q, want slot %s's", v, w.slot)
	}

	killed := time.Now()
	w.rep.Kill9()
	ttl := c.pttl(wkey)
	expiry := time.Now().Add(ttl)
	t.Logf("killed %s waiting with slot %s (slot %s runs on %s); its waiting record had %v left",
		w.rep.name, w.slot, cur.Slot, cur.Replica, ttl)
	if ttl <= 0 || ttl > queueLease {
		t.Errorf("waiting record TTL after the kill %v, want within (0, %v]", ttl, queueLease)
	}

	var next waiter
	awaitPoll(t, "a slot to wait again after the killed waiter's record ran out", queueLease+6*time.Second,
		func() []waiter { return c.waiters(cur.Slot) },
		func(ws []waiter) bool {
			for _, x := range ws {
				if x.rep != w.rep {
					next = x
					return true
				}
			}
			return false
		},
		func(ws []waiter) string { return fmt.Sprintf("waits logged: %+v", ws) })
	t.Logf("slot %s waits on %s %v after the kill, %v after the killed waiter's record ran out",
		next.slot, next.rep.name, next.at.Sub(killed), next.at.Sub(expiry))
	if next.at.Before(expiry.Add(-50 * time.Millisecond)) {
		t.Errorf("slot %s waited %v before the killed waiter's record ran out: two waiters", next.slot, expiry.Sub(next.at))
	}
	// A slot fires every 2 s (the killed slot's retry may come first).
	if d := next.at.Sub(expiry); d > 2*time.Second+time.Second {
		t.Errorf("slot %s waited %v after the killed waiter's record ran out, want within a period (2s)", next.slot, d)
	}

	open(cur.Slot)
	evs := c.ledger.await("the new waiter "+next.slot+" to start", 10*time.Second, func(evs []event) bool {
		return len(find(bySlot(evs)[next.slot], "start", 0)) > 0
	})
	ended := find(bySlot(evs)[cur.Slot], "end", 0)[0]
	started := find(bySlot(evs)[next.slot], "start", 0)[0]
	t.Logf("slot %s started %v after slot %s ended", next.slot, started.At.Sub(ended.At), cur.Slot)
	if d := started.At.Sub(ended.At); d < 0 || d > time.Second {
		t.Errorf("slot %s started %v after the running slot ended, want within a second", next.slot, d)
	}
	open("all")
	evs = c.ledger.await("a run after the new waiter's", 10*time.Second, func(evs []event) bool {
		ss := find(evs, "start", 0)
		return ss[len(ss)-1].At.After(started.At) && len(find(bySlot(evs)[next.slot], "end", 0)) > 0
	})
	checkSerial(t, evs, nil)
}
