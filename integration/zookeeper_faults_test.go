package integration

// Faults of the ZooKeeper store, with slotd processes on a three-member
// ensemble: the leader killed during a running slot and during a burst; a
// replica cut off (toxiproxy) until its session expires; the quorum lost
// and regained.

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/zktest"
	"github.com/slotd/slotd/lock"
)

// onceEach checks, task by task, that every slot started and ended once as
// attempt 1 with the common token, and that no slot is missing between a
// task's first and last at period apart. It returns the slots per task.
func onceEach(t *testing.T, evs []event, period time.Duration) map[string][]string {
	t.Helper()
	byTask := map[string][]event{}
	for _, e := range evs {
		byTask[e.Task] = append(byTask[e.Task], e)
	}
	out := map[string][]string{}
	for task, es := range byTask {
		slots := bySlot(es)
		ids := sortedSlots(slots)
		var prev time.Time
		for _, id := range ids {
			at := slotTime(t, id)
			starts, ends := find(slots[id], "start", 0), find(slots[id], "end", 0)
			if len(starts) != 1 || len(ends) != 1 || len(slots[id]) != 2 {
				t.Errorf("task %s slot %s: want one start and one end, got:\n%s", task, id, dump(slots[id]))
			} else if s := starts[0]; s.Attempt != 1 || s.Token != lock.Token(at, 1) || s.At.Before(at) {
				t.Errorf("task %s slot %s: %v; want attempt 1, token %d, not before the slot time", task, id, s, lock.Token(at, 1))
			}
			if !prev.IsZero() && at.Sub(prev) != period {
				t.Errorf("task %s: slots lost between %s and %s", task, prev.Format("150405"), at.Format("150405"))
			}
			prev = at
		}
		out[task] = ids
	}
	return out
}

// everyStartedSlotEnded reports whether every slot the ledger has a start
// of has an end too.
func everyStartedSlotEnded(evs []event) bool {
	for _, es := range bySlot(evs) {
		started, ended := map[string]bool{}, map[string]bool{}
		for _, e := range es {
			switch e.Kind {
			case "start":
				started[e.Task] = true
			case "end":
				ended[e.Task] = true
			}
		}
		for task := range started {
			if !ended[task] {
				return false
			}
		}
	}
	return true
}

// endedWithoutGaps reports whether every task's ended slots follow one
// another period apart. A slot fired during an election may still be
// claiming (its window is 30 s) when later ones have run: a test that
// stops the replicas before it ends would read it as lost.
func endedWithoutGaps(t *testing.T, evs []event, period time.Duration) bool {
	t.Helper()
	ended := map[string][]time.Time{}
	for _, e := range evs {
		if e.Kind == "end" {
			ended[e.Task] = append(ended[e.Task], slotTime(t, e.Slot))
		}
	}
	for _, ats := range ended {
		slices.SortFunc(ats, time.Time.Compare)
		for i := 1; i < len(ats); i++ {
			if ats[i].Sub(ats[i-1]) > period {
				return false
			}
		}
	}
	return true
}

const zkFaultDefaults = `lease = "5s"
max_attempts = 3
timeout = "1m"
catchup = "none"`

// The leader is killed while a slot runs: the ensemble elects another
// within the lease, the running attempt keeps its claim (its session
// moves to another member), and every slot — those fired during the
// election too (their window is 30s) — runs once.
func TestZooKeeperLeaderKilledMidSlot(t *testing.T) {
	e := zktest.Start(t, 3)
	c := zkCluster(t, e)
	task := c.execTask("tick", "@every 1s", `rec start; sleep 0.5; rec end`, `deadline = "30s"`)
	for _, name := range []string{"r1", "r2"} {
		c.reps = append(c.reps, startReplica(t, name, zkConfig(name, e.Servers(), zkFaultDefaults, task)))
	}
	c.ledger.await("2 completed slots", 30*time.Second, func(evs []event) bool { return slotsWith(evs, "end", 1) >= 2 })
	n := len(c.ledger.read())
	c.ledger.await("a slot running", 10*time.Second, func(evs []event) bool {
		return len(evs) > n && evs[len(evs)-1].Kind == "start"
	})
	leader := e.WaitLeader(10 * time.Second)
	killed := time.Now()
	leader.Stop()
	next := e.WaitLeader(30 * time.Second)
	elected := time.Since(killed)
	evs := c.ledger.await("5 slots started after the kill, and every slot before them ended", 30*time.Second, func(evs []event) bool {
		n := 0
		for _, e := range evs {
			if e.Kind == "end" && e.At.After(killed) {
				n++
			}
		}
		return n >= 5 && endedWithoutGaps(t, evs, time.Second)
	})
	c.stopAll()
	evs = c.ledger.read()
	onceEach(t, evs, time.Second)
	var firstAfter time.Time
	for _, e := range evs {
		if e.Kind == "start" && e.At.After(killed) && (firstAfter.IsZero() || e.At.Before(firstAfter)) {
			firstAfter = e.At
		}
	}
	t.Logf("leader %d killed; member %d elected %v later; the first attempt after the kill started %v after it",
		leader.ID, next.ID, elected, firstAfter.Sub(killed))
	if took := firstAfter.Sub(killed); took > 5*time.Second+elected+2*time.Second {
		t.Errorf("no attempt for %v after the kill; want within the lease (5s) and the election (%v)", took, elected)
	}
}

// The leader is killed as 30 tasks fire together: every slot of every task
// runs once, none lost.
func TestZooKeeperLeaderKilledInBurst(t *testing.T) {
	e := zktest.Start(t, 3)
	c := zkCluster(t, e)
	// A 10 s lease (and so session): 30 processes every 3 s, three
	// members and their election on two loaded cores starved 5 s
	// renewals in CI, and a lost lease's retry is not what this test
	// looks at.
	burstDefaults := strings.Replace(zkFaultDefaults, `lease = "5s"`, `lease = "10s"`, 1)
	var tasks []string
	for i := range 30 {
		tasks = append(tasks, c.execTask(fmt.Sprintf("b%02d", i), "@every 3s", `rec start; sleep 0.3; rec end`, `deadline = "30s"`))
	}
	for _, name := range []string{"r1", "r2"} {
		c.reps = append(c.reps, startReplica(t, name, zkConfig(name, e.Servers(), burstDefaults, tasks...)))
	}
	c.ledger.await("a first burst", 30*time.Second, func(evs []event) bool {
		if len(evs) == 0 && !c.reps[0].running() {
			t.Fatalf("r1 exited:\n%s", tail(c.reps[0].log(), 20))
		}
		return len(find(evs, "end", 1)) >= 30
	})
	n := len(c.ledger.read())
	c.ledger.await("the next burst starting", 10*time.Second, func(evs []event) bool { return len(evs) > n })
	leader := e.WaitLeader(10 * time.Second)
	killed := time.Now()
	leader.Stop()
	e.WaitLeader(30 * time.Second)
	elected := time.Since(killed)
	c.ledger.await("two bursts after the kill, and every slot before them ended", 60*time.Second, func(evs []event) bool {
		n := 0
		for _, e := range evs {
			if e.Kind == "end" && e.At.After(killed.Add(3*time.Second)) {
				n++
			}
		}
		return n >= 60 && endedWithoutGaps(t, evs, 3*time.Second)
	})
	// The burst under way when that holds is let end before the stop
	// (its processes may start seconds late on a loaded machine): a slot
	// stopped mid-run would read as run without an end.
	judged := c.ledger.await("every started slot ended", 30*time.Second, everyStartedSlotEnded)
	c.stopAll()
	// A burst may start between that look and the stop, and be cut by
	// it: the slots up to the last one judged must each have run once
	// and ended; a later one must not have started twice.
	var cut string
	for _, e := range judged {
		cut = max(cut, e.Slot)
	}
	var evs []event
	for _, e := range c.ledger.read() {
		if e.Slot <= cut {
			evs = append(evs, e)
		}
	}
	starts := map[string]int{}
	for _, e := range c.ledger.read() {
		if e.Slot > cut && e.Kind == "start" {
			if starts[e.Task+" "+e.Slot]++; starts[e.Task+" "+e.Slot] > 1 {
				t.Errorf("task %s slot %s, after the last judged, started twice", e.Task, e.Slot)
			}
		}
	}
	slots := onceEach(t, evs, 3*time.Second)
	if len(slots) != 30 {
		t.Fatalf("%d tasks ran, want 30", len(slots))
	}
	var firstAfter time.Time
	for _, e := range evs {
		if e.Kind == "start" && e.At.After(killed) && (firstAfter.IsZero() || e.At.Before(firstAfter)) {
			firstAfter = e.At
		}
	}
	t.Logf("leader %d killed during a burst, another elected %v later; the first attempt after the kill started %v after it; slots per task: %d",
		leader.ID, elected, firstAfter.Sub(killed), len(slots["b00"]))
	if took := firstAfter.Sub(killed); took > 10*time.Second+elected+2*time.Second {
		t.Errorf("no attempt for %v after the kill; want within the lease (10s) and the election (%v)", took, elected)
	}
}

// A replica cut off from the ensemble (every link blackholed by toxiproxy)
// while its task runs: its watchdog cancels the task before its session
// expires, so before the peer's attempt starts, and the peer's token is
// higher.
func TestZooKeeperPartitionedReplicaCancelledFirst(t *testing.T) {
	e := zktest.Start(t, 3)
	c := zkCluster(t, e)
	spec, _ := oneShot(5 * time.Second)
	task := c.execTask("cutoff", spec, `rec start; sleep 60 & wait; rec end`, `deadline = "50s"`)
	defaults := `lease = "2s"
max_attempts = 5
timeout = "2m"
catchup = "latest"`
	proxies := map[string][]*netProxy{}
	for _, name := range []string{"r1", "r2"} {
		var addrs []string
		for _, m := range e.Members {
			np := newNetProxy(t, fmt.Sprintf("%s-zk%d", name, m.ID), m.Addr)
			proxies[name] = append(proxies[name], np)
			addrs = append(addrs, np.Addr())
		}
		c.reps = append(c.reps, startReplica(t, name, zkConfig(name, addrs, defaults, task)))
	}
	first, holder := c.firstAttempt()
	cutAt := time.Now()
	for _, np := range proxies[holder.name] {
		np.add("cut", "timeout", "upstream", map[string]any{"timeout": 0})
	}
	lost := holder.awaitLog("lease lost", 10*time.Second, func(r logRec) bool {
		return r.msg() == "lease lost: cancelling the task" && r.str("slot") == first.Slot && r.num("attempt") == 1
	})
	evs := c.ledger.await("the peer's attempt 2", 20*time.Second, func(evs []event) bool { return len(find(evs, "start", 2)) > 0 })
	second := find(evs, "start", 2)[0]
	t.Logf("cut at 0: %s's task cancelled at %v; %s's attempt 2 started at %v", holder.name, lost.time().Sub(cutAt), second.Replica, second.At.Sub(cutAt))
	if second.Replica == holder.name || second.Slot != first.Slot {
		t.Fatalf("attempt 2 = %v, want the peer's, of slot %s", second, first.Slot)
	}
	if !lost.time().Before(second.At) {
		t.Errorf("the cut-off holder's task was cancelled at %v, after the peer's attempt started at %v", lost.time(), second.At)
	}
	if second.Token <= first.Token {
		t.Errorf("peer's token %d not above the holder's %d", second.Token, first.Token)
	}
	// The session (2s, the lease) expires at most its timeout after the
	// ensemble last heard from the holder; the peer's watch fires then.
	if took := second.At.Sub(cutAt); took > 2*time.Second+2*time.Second {
		t.Errorf("takeover took %v after the cut, want within the session timeout and a lease (4s)", took)
	}
	awaitGroupGone(t, first.PGID, 5*time.Second)
	for _, np := range proxies[holder.name] {
		np.remove("cut")
	}
	// Back on the ensemble with a new session, the holder finds its claim
	// gone and runs nothing more of the slot.
	holder.awaitLog("attempt 1 to end", 10*time.Second, func(r logRec) bool {
		return r.msg() == "attempt failed" && r.str("slot") == first.Slot && r.num("attempt") == 1 && r.str("outcome") == "lease_lost"
	})
	c.stopAll()
	if starts := find(c.ledger.read(), "start", 0); len(starts) != 2 {
		t.Errorf("%d attempts started, want 2:\n%s", len(starts), dump(starts))
	}
}

// The ensemble loses its quorum: claims stop, nothing runs, /readyz fails;
// when the quorum returns, slots run again and /readyz recovers.
func TestZooKeeperQuorumLost(t *testing.T) {
	e := zktest.Start(t, 3)
	c := zkCluster(t, e)
	task := c.execTask("tick", "@every 1s", `rec start; rec end`, "")
	r := startReplica(t, "r1", zkConfig("r1", e.Servers(), `lease = "5s"
catchup = "none"`, task))
	c.reps = append(c.reps, r)
	addr := r.httpAddr(15 * time.Second)
	c.ledger.await("2 completed slots", 30*time.Second, func(evs []event) bool { return slotsWith(evs, "end", 1) >= 2 })
	awaitStatus(t, addr, "/readyz", http.StatusOK, 15*time.Second)

	lostAt := time.Now()
	e.Members[0].Stop()
	e.Members[1].Stop()
	_, took := awaitStatus(t, addr, "/readyz", http.StatusServiceUnavailable, 30*time.Second)
	t.Logf("/readyz failed %v after the quorum was lost", took)
	if took > 2*time.Second { // issue 26 item 13: a ping through the quorum every 500 ms
		t.Errorf("/readyz failed %v after the quorum was lost; want at most 2s", took)
	}
	time.Sleep(3 * time.Second) // a window in which nothing may start
	backAt := time.Now()
	e.Members[0].Start()
	e.Members[1].Start()
	c.ledger.await("2 slots after the quorum returned", 60*time.Second, func(evs []event) bool {
		return slices.ContainsFunc(evs, func(e event) bool { return e.Kind == "end" && e.At.After(backAt.Add(time.Second)) })
	})
	awaitStatus(t, addr, "/readyz", http.StatusOK, 30*time.Second)
	c.stopAll()
	evs := c.ledger.read()
	for _, e := range evs {
		// An attempt already started may end once its lease is gone; none
		// starts while no quorum can commit its claim.
		if e.Kind == "start" && e.At.After(lostAt.Add(2*time.Second)) && e.At.Before(backAt) {
			t.Errorf("an attempt started while the ensemble had no quorum: %v", e)
		}
	}
	for id, es := range bySlot(evs) {
		if len(find(es, "start", 0)) > 1 {
			t.Errorf("slot %s ran more than once:\n%s", id, dump(es))
		}
	}
}

// The holder (daemon and task) is frozen for longer than its lease but
// less than its session timeout (session_timeout 10s, lease 5s, frozen
// 7s), as a VM pause would: its session lives through the freeze, yet a
// live peer runs attempt 2 within a lease and a bound, because a run node
// whose lease ran out by the leader's clock is free to claim; thawed, the
// holder finds its lease lost, kills its task and leaves the peer's claim
// alone. (Before, the run node held the slot for as long as the session
// lived, and no peer ran it in its window.)
func TestZooKeeperFrozenHolderSessionSurvives(t *testing.T) {
	e := zktest.Start(t, 1)
	c := zkCluster(t, e)
	const lease, frozen = 5 * time.Second, 7 * time.Second
	spec, _ := oneShot(4 * time.Second)
	task := c.execTask("frozen", spec, `rec start; sleep 20; rec end`, `deadline = "30s"`)
	defaults := `lease = "5s"
max_attempts = 3
timeout = "1m"
catchup = "latest"`
	for _, name := range []string{"r1", "r2"} {
		cfg := zkConfig(name, e.Servers(), defaults, task)
		cfg = strings.Replace(cfg, "\n\n[http]", "\nsession_timeout = \"10s\"\n\n[http]", 1)
		c.reps = append(c.reps, startReplica(t, name, cfg))
	}
	first, holder := c.firstAttempt()
	stopAt := freeze(t, holder, first.PGID)
	evs := c.ledger.await("the peer's attempt 2", frozen, func(evs []event) bool { return len(find(evs, "start", 2)) > 0 })
	second := find(evs, "start", 2)[0]
	takeover := second.At.Sub(stopAt)
	t.Logf("froze %s %v into attempt 1; %s's attempt 2 started %v after the freeze (lease %v)",
		holder.name, stopAt.Sub(first.At), second.Replica, takeover, lease)
	if second.Replica == holder.name || second.Slot != first.Slot || second.Token <= first.Token {
		t.Fatalf("attempt 2 = %v; want the peer's, of slot %s, with a token above %d", second, first.Slot, first.Token)
	}
	if takeover > lease+2*time.Second {
		t.Errorf("takeover %v after the freeze, want within the lease and 2s", takeover)
	}
	if d := time.Until(stopAt.Add(frozen)); d > 0 {
		time.Sleep(d) // the freeze lasts 7s whatever the peer did: less than the session timeout
	}
	holder.Signal(syscall.SIGCONT)
	_ = syscall.Kill(-first.PGID, syscall.SIGCONT)
	failed := holder.awaitLog("attempt 1 to end", 10*time.Second, func(r logRec) bool {
		return r.msg() == "attempt failed" && r.str("slot") == first.Slot && r.num("attempt") == 1
	})
	if o := failed.str("outcome"); o != "lease_lost" {
		t.Errorf("attempt 1 outcome %q, want lease_lost", o)
	}
	awaitGroupGone(t, first.PGID, 5*time.Second)
	for _, r := range holder.records() {
		if r.str("slot") == first.Slot && strings.Contains(r.msg(), "release failed") {
			t.Errorf("thawed holder: %v", r)
		}
	}
	c.stopAll()
	if starts := find(c.ledger.read(), "start", 0); len(starts) != 2 {
		t.Errorf("%d attempts started, want 2:\n%s", len(starts), dump(starts))
	}
}
