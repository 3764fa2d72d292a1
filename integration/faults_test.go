package integration

// Fault-injection tests (issue 4): real slotd processes and a real
// redis-server on loopback; tasks append to the ledger and write their
// results to the sink (sink_test.go), which refuses a stale fencing token.
// Helpers shared by the faults_*_test.go files are at the end of this file.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slotd/slotd/lock"
)

// sinkScript is the task of the sink tests: it announces its token to the
// sink, works for `work` seconds, and writes its result. A refused write
// is recorded as "rejected" and the task then lingers, so that only slotd
// (SIGTERM on a lost lease) can end it — a stale task never exits on its
// own and never records "end".
func sinkScript(work string) string {
	return `rec start
post begin || { rec rejected; sleep 60; exit 3; }
sleep ` + work + `
post commit || { rec rejected; sleep 60; exit 3; }
rec end`
}

// Scenario 2. The holder (daemon and task) is frozen with SIGSTOP for twice
// the lease, as a VM pause would: a peer takes the slot over after the lease
// with attempt 2 and a higher token. When the frozen task is thawed first it
// tries to write its result — the sink refuses it (stale token); when its
// daemon is thawed, the watchdog finds the lease lost, kills the task
// (SIGKILL: no grace once the lease is lost) and neither completes nor releases the slot, which stays done by
// the peer. The sink accepts exactly one result for the slot.
func TestSigstopHolderPastLease(t *testing.T) {
	t.Parallel()
	const lease = 2 * time.Second
	c := newCluster(t)
	s := newSink(t)
	spec, at := oneShot(3 * time.Second)
	c.start(3, "1s", `lease = "2s"
max_attempts = 3
timeout = "1m"
catchup = "latest"`,
		c.sinkTask(s, "paused", spec, sinkScript("1.5"), `deadline = "25s"`))

	first, holder := c.firstAttempt()
	slot := first.Slot
	stopAt := freeze(t, holder, first.PGID)
	t.Logf("froze %s and its task (pgid %d) %v after the slot time", holder.name, first.PGID, stopAt.Sub(at))

	evs := c.ledger.await("a peer's attempt 2", 2*lease+5*time.Second, func(evs []event) bool {
		return len(find(bySlot(evs)[slot], "start", 2)) > 0
	})
	second := find(bySlot(evs)[slot], "start", 2)[0]
	takeover := second.At.Sub(stopAt)
	t.Logf("attempt 2 on %s %v after the freeze (lease %v)", second.Replica, takeover, lease)
	if second.Replica == holder.name {
		t.Errorf("attempt 2 ran on the frozen replica %s", second.Replica)
	}
	if takeover > lease+2*time.Second {
		t.Errorf("takeover %v after the freeze, want within lease + 2s", takeover)
	}
	if want := lock.Token(at, 2); second.Token != want || second.Token <= first.Token {
		t.Errorf("attempt 2 token %d, want %d (> attempt 1's %d)", second.Token, want, first.Token)
	}
	s.await("attempt 2's begin", 5*time.Second, func(ws []sinkWrite) bool {
		for _, w := range ws {
			if w.Slot == slot && w.Token == second.Token && w.Accepted {
				return true
			}
		}
		return false
	})
	if d := time.Until(stopAt.Add(2 * lease)); d > 0 {
		time.Sleep(d) // the freeze lasts 2x the lease whatever the peer did
	}

	// Thaw the task first: its sleep is over, it writes its result at once.
	_ = syscall.Kill(-first.PGID, syscall.SIGCONT)
	c.ledger.await("the stale holder's refused write", 5*time.Second, func(evs []event) bool {
		return len(find(bySlot(evs)[slot], "rejected", 1)) > 0
	})
	contAt := time.Now()
	holder.Signal(syscall.SIGCONT)
	t.Logf("thawed after %v", contAt.Sub(stopAt))

	// The thawed daemon finds its lease lost and cancels the task.
	lostRec := holder.awaitLog("lease lost on attempt 1", 5*time.Second, func(r logRec) bool {
		return r.msg() == "lease lost: cancelling the task" && r.str("slot") == slot && r.num("attempt") == 1
	})
	failed := holder.awaitLog("attempt 1 to end", 5*time.Second, func(r logRec) bool {
		return r.msg() == "attempt failed" && r.str("slot") == slot && r.num("attempt") == 1
	})
	if o := failed.str("outcome"); o != "lease_lost" {
		t.Errorf("attempt 1 outcome %q, want lease_lost", o)
	}
	awaitGroupGone(t, first.PGID, 5*time.Second)
	t.Logf("thawed daemon: lease lost %v after SIGCONT, attempt 1 ended (%s) %v after it; task group gone %v after it",
		lostRec.time().Sub(contAt), failed.str("outcome"), failed.time().Sub(contAt), time.Since(contAt))

	evs = c.ledger.await("attempt 2 to end", 10*time.Second, func(evs []event) bool {
		return len(find(bySlot(evs)[slot], "end", 2)) > 0
	})
	done := "done:" + second.Replica + ":2:"
	c.awaitKey(stateKey("paused", slot), "to read "+done+"<ms>", 5*time.Second, func(v string, _ bool) bool {
		return strings.HasPrefix(v, done)
	})
	// The stale holder is done with the slot (its attempt ended above):
	// whatever it did on waking left the peer's marker alone.
	if v, _ := c.get(stateKey("paused", slot)); !strings.HasPrefix(v, done) {
		t.Errorf("slot %s: state %q after the stale holder woke, want %s<ms>", slot, v, done)
	}
	if n, _ := c.get(attemptsKey("paused", slot)); n != "2" {
		t.Errorf("slot %s: attempts %q, want 2", slot, n)
	}
	es := bySlot(evs)[slot]
	if len(find(es, "end", 1)) != 0 || len(find(es, "start", 0)) != 2 {
		t.Errorf("slot %s: want attempt 1 (stale, no end) and attempt 2 only:\n%s", slot, dump(es))
	}
	commits := s.results("commit", slot, true)
	if len(commits) != 1 || commits[0].Token != second.Token {
		t.Errorf("slot %s: accepted results %v, want exactly attempt 2's (token %d):\n%s", slot, commits, second.Token, dumpWrites(s.all()))
	}
	if len(s.results("commit", slot, false)) == 0 && len(s.results("begin", slot, false)) == 0 {
		t.Errorf("slot %s: the stale holder's write was not refused by the sink:\n%s", slot, dumpWrites(s.all()))
	}
	for _, r := range holder.records() {
		if r.str("slot") == slot && (r.msg() == "attempt succeeded" || strings.Contains(r.msg(), "release failed")) {
			t.Errorf("stale holder: %v", r)
		}
	}
	if !holder.running() {
		t.Errorf("the thawed replica %s exited", holder.name)
	}
}

// Scenario 3a. A freeze of half the lease (daemon and task), placed just
// before a renewal was due, so that the last confirmed renewal is as old as
// it gets: the lease is still valid on waking, the watchdog renews it, no
// peer takes over, and the slot runs once, as attempt 1.
func TestSigstopHolderHalfLease(t *testing.T) {
	t.Parallel()
	const lease = 6 * time.Second
	c := newCluster(t)
	s := newSink(t)
	spec, at := oneShot(3 * time.Second)
	c.start(3, "1s", `lease = "6s"
max_attempts = 3
timeout = "1m"
catchup = "latest"`,
		c.sinkTask(s, "hiccup", spec, sinkScript("6"), `deadline = "30s"`))

	first, holder := c.firstAttempt()
	slot := first.Slot
	// Renewals fall due every lease/3 = 2s after the claim; freeze 1.85s into
	// the attempt, i.e. just before the first one.
	time.Sleep(time.Until(first.At.Add(lease/3 - 150*time.Millisecond)))
	stopAt := freeze(t, holder, first.PGID)
	time.Sleep(lease / 2)
	_ = syscall.Kill(-first.PGID, syscall.SIGCONT)
	holder.Signal(syscall.SIGCONT)
	t.Logf("froze %s %v into attempt 1 for %v", holder.name, stopAt.Sub(first.At), time.Since(stopAt))

	evs := c.ledger.await("the slot to end", 20*time.Second, func(evs []event) bool {
		return len(find(bySlot(evs)[slot], "end", 0)) > 0
	})
	done := "done:" + holder.name + ":1:"
	c.awaitKey(stateKey("hiccup", slot), "to read "+done+"<ms>", 5*time.Second, func(v string, _ bool) bool {
		return strings.HasPrefix(v, done)
	})
	es := bySlot(evs)[slot]
	if len(find(es, "start", 0)) != 1 || len(find(es, "end", 1)) != 1 {
		t.Errorf("slot %s: want one run, attempt 1:\n%s", slot, dump(es))
	}
	if n, _ := c.get(attemptsKey("hiccup", slot)); n != "1" {
		t.Errorf("slot %s: attempts %q, want 1", slot, n)
	}
	if commits := s.results("commit", slot, true); len(commits) != 1 || commits[0].Token != lock.Token(at, 1) {
		t.Errorf("slot %s: accepted results %v, want one with token %d", slot, commits, lock.Token(at, 1))
	}
	for _, r := range c.reps {
		for _, rec := range r.records() {
			if strings.HasPrefix(rec.msg(), "lease lost") {
				t.Errorf("replica %s: %v", r.name, rec)
			}
		}
	}
}

// Scenario 3b. A task that runs for 10x its lease (1s) keeps it through
// ~30 renewals: no takeover, one run, attempt 1.
func TestLongTaskKeepsLease(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	s := newSink(t)
	spec, at := oneShot(3 * time.Second)
	c.start(2, "1s", `lease = "1s"
max_attempts = 3
timeout = "1m"
catchup = "latest"`,
		c.sinkTask(s, "marathon", spec, sinkScript("10"), `deadline = "30s"`))

	evs := c.ledger.await("the 10s task to end", 25*time.Second, func(evs []event) bool { return len(find(evs, "end", 0)) > 0 })
	end := find(evs, "end", 0)[0]
	slot := end.Slot
	done := "done:" + end.Replica + ":1:"
	c.awaitKey(stateKey("marathon", slot), "to read "+done+"<ms>", 5*time.Second, func(v string, _ bool) bool {
		return strings.HasPrefix(v, done)
	})
	starts := find(evs, "start", 0)
	if len(starts) != 1 || starts[0].Attempt != 1 || end.Attempt != 1 {
		t.Errorf("want one run as attempt 1:\n%s", dump(evs))
	}
	if n, _ := c.get(attemptsKey("marathon", slot)); n != "1" {
		t.Errorf("slot %s: attempts %q, want 1", slot, n)
	}
	if commits := s.results("commit", slot, true); len(commits) != 1 || commits[0].Token != lock.Token(at, 1) {
		t.Errorf("slot %s: accepted results %v, want one with token %d", slot, commits, lock.Token(at, 1))
	}
	holder := c.replica(end.Replica)
	renewals := holder.metric(t, `slotd_lease_renewals_total{task="marathon"}`)
	t.Logf("task ran %v on a 1s lease; %v renewals", end.At.Sub(starts[0].At), renewals)
	if renewals < 20 {
		t.Errorf("%v lease renewals over a 10s run on a 1s lease, want >= 20", renewals)
	}
}

// Scenario 4. redis-server restarted empty while attempt 1 runs. The
// holder's next renewal finds no key: the lease is lost (renew is
// compare-then-PEXPIRE, it never recreates a key) and the task is
// cancelled. The slot then runs again and ends with one accepted result.
//
// What is and is not guaranteed here: a restart without persistence loses
// every slotd key — leases, done markers and attempt counters. slotd does not
// recreate a key it lost, and it does not run a lost lease's task on; but
// the slot is claimable again, its attempt counter starts from 1, and so the
// rerun carries the SAME fencing token as the cancelled run. A slot already
// done before the restart could run a second time inside its window. Only a
// downstream store that accepts one result per token (as the sink does)
// keeps the effect single.
func TestRedisRestartedEmptyMidTask(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	s := newSink(t)
	spec, at := oneShot(3 * time.Second)
	c.start(3, "1s", `lease = "2s"
max_attempts = 3
timeout = "1m"
catchup = "latest"`,
		c.sinkTask(s, "amnesia", spec, sinkScript("3"), `deadline = "25s"`))

	first, holder := c.firstAttempt()
	slot := first.Slot
	key := stateKey("amnesia", slot)
	restartAt := time.Now()
	c.srv.Restart()
	t.Logf("redis restarted empty %v into attempt 1 on %s (took %v)", restartAt.Sub(first.At), holder.name, time.Since(restartAt))

	// Until the holder has logged its loss, its key must not reappear.
	lost := false
	for deadline := time.Now().Add(5 * time.Second); !lost; {
		v, ok := c.get(key)
		lost = holder.hasLog(func(r logRec) bool {
			return r.msg() == "lease lost: cancelling the task" && r.str("slot") == slot && r.num("attempt") == 1
		})
		if ok && v == "run:"+holder.name+":1" && !lost {
			t.Errorf("slot %s: %s holds %q again before the holder saw its lease lost", slot, key, v)
		}
		if time.Now().After(deadline) {
			t.Fatalf("holder %s did not log its lease lost within 5s of the restart", holder.name)
		}
		time.Sleep(poll)
	}
	rec := holder.awaitLog("lease lost", time.Second, func(r logRec) bool {
		return r.msg() == "lease lost: cancelling the task" && r.str("slot") == slot
	})
	t.Logf("holder: lease lost %v after the restart: %s", rec.time().Sub(restartAt), rec.str("err"))
	awaitGroupGone(t, first.PGID, 5*time.Second)

	evs := c.ledger.await("the slot to end", 20*time.Second, func(evs []event) bool {
		return len(find(bySlot(evs)[slot], "end", 0)) > 0
	})
	es := bySlot(evs)[slot]
	end := find(es, "end", 0)[0]
	done := "done:" + end.Replica + ":" + fmt.Sprint(end.Attempt) + ":"
	c.awaitKey(key, "to read "+done+"<ms>", 5*time.Second, func(v string, _ bool) bool { return strings.HasPrefix(v, done) })
	starts := find(es, "start", 0)
	t.Logf("runs of slot %s:\n%s", slot, dump(es))
	if len(find(es, "end", 0)) != 1 || len(starts) != 2 {
		t.Errorf("slot %s: want the cancelled run and one rerun that ended:\n%s", slot, dump(es))
	}
	if len(starts) == 2 && starts[1].At.Before(restartAt) {
		t.Errorf("slot %s: rerun started before the restart", slot)
	}
	if commits := s.results("commit", slot, true); len(commits) != 1 {
		t.Errorf("slot %s: %d accepted results, want 1:\n%s", slot, len(commits), dumpWrites(s.all()))
	}
	if end.Token != lock.Token(at, 1) {
		t.Logf("rerun token %d (attempt %d)", end.Token, end.Attempt)
	} else {
		t.Logf("rerun carries the cancelled run's token %d: the attempt counter restarted with Redis", end.Token)
	}
}

// Scenario 5. redis-server frozen (SIGSTOP) for twice the lease while
// attempt 1 runs. The holder cannot renew: its watchdog must cancel the task
// at 90% of the lease, and the slot is not completed by it. Claims sent
// meanwhile time out and run nothing (fail closed). After SIGCONT exactly
// one replica completes the slot and the sink accepts one result.
//
// This failed every time until cli set go-redis's ContextTimeoutEnabled:
// without it the renewal's deadline was ignored and the call waited out the
// 3s ReadTimeout, past the 2s lease. The variant below pins the socket
// timeouts short as well.
func TestRedisStalledPastLease(t *testing.T) {
	t.Parallel()
	redisStalledPastLease(t, "")
}

// Scenario 5 with socket timeouts far below the lease in the Redis URL,
// which bound every blocked call even without a context deadline.
func TestRedisStalledPastLeaseShortReadTimeout(t *testing.T) {
	t.Parallel()
	redisStalledPastLease(t, "?read_timeout=100ms&write_timeout=100ms")
}

func redisStalledPastLease(t *testing.T, urlQuery string) {
	const lease = 2 * time.Second
	c := newCluster(t)
	s := newSink(t)
	spec, _ := oneShot(3 * time.Second)
	for _, name := range []string{"r1", "r2", "r3"} {
		c.reps = append(c.reps, startReplica(t, name, config(name, c.srv.URL()+urlQuery, "1s", `lease = "2s"
max_attempts = 5
timeout = "1m"
catchup = "latest"`,
			c.sinkTask(s, "frozen", spec, sinkScript("3"), `deadline = "25s"`))))
	}

	first, holder := c.firstAttempt()
	slot := first.Slot
	stallAt := time.Now()
	c.srv.Signal(syscall.SIGSTOP)
	stalled := true
	t.Cleanup(func() {
		if stalled {
			_ = syscall.Kill(c.srv.PID(), syscall.SIGCONT)
		}
	})
	rec := holder.awaitLog("lease lost while Redis is frozen", 2*lease, func(r logRec) bool {
		return r.msg() == "lease lost: cancelling the task" && r.str("slot") == slot
	})
	t.Logf("holder %s: lease lost %v into the stall (%v after attempt 1 started): %s",
		holder.name, rec.time().Sub(stallAt), rec.time().Sub(first.At), rec.str("err"))
	if d := rec.time().Sub(first.At); d > lease {
		t.Errorf("lease declared lost %v after the claim, after the lease %v itself", d, lease)
	}
	awaitGroupGone(t, first.PGID, 5*time.Second)
	if d := time.Until(stallAt.Add(2 * lease)); d > 0 {
		time.Sleep(d)
	}
	c.srv.Signal(syscall.SIGCONT)
	stalled = false
	contAt := time.Now()

	evs := c.ledger.await("the slot to end", 20*time.Second, func(evs []event) bool {
		return len(find(bySlot(evs)[slot], "end", 0)) > 0
	})
	es := bySlot(evs)[slot]
	end := find(es, "end", 0)[0]
	done := fmt.Sprintf("done:%s:%d:", end.Replica, end.Attempt)
	c.awaitKey(stateKey("frozen", slot), "to read "+done+"<ms>", 5*time.Second, func(v string, _ bool) bool {
		return strings.HasPrefix(v, done)
	})
	attempts, _ := c.get(attemptsKey("frozen", slot))
	t.Logf("after SIGCONT: attempt %d on %s started %v later; attempts counter %s; runs:\n%s",
		end.Attempt, end.Replica, find(es, "start", end.Attempt)[0].At.Sub(contAt), attempts, dump(es))
	if len(find(es, "end", 0)) != 1 || len(find(es, "end", 1)) != 0 {
		t.Errorf("slot %s: want exactly one run to end, not attempt 1:\n%s", slot, dump(es))
	}
	for _, st := range find(es, "start", 0) {
		if st.Attempt > 1 && st.At.Before(contAt) {
			t.Errorf("slot %s: attempt %d started while Redis was frozen", slot, st.Attempt)
		}
	}
	if commits := s.results("commit", slot, true); len(commits) != 1 || commits[0].Token != end.Token {
		t.Errorf("slot %s: accepted results %v, want one, token %d:\n%s", slot, commits, end.Token, dumpWrites(s.all()))
	}
	// Leave time for a stray completion to show, then check again.
	time.Sleep(lease)
	if v, _ := c.get(stateKey("frozen", slot)); !strings.HasPrefix(v, done) {
		t.Errorf("slot %s: state %q, want still %s<ms>", slot, v, done)
	}
	if n := len(find(c.ledger.read(), "end", 0)); n != 1 {
		t.Errorf("%d runs ended, want 1", n)
	}
}

// ---- helpers shared by the faults tests ----

// oneShot returns a 6-field cron spec (UTC) that fires once a day, at the
// first whole second at least lead from now, and that time. A test that
// needs one slot soon uses it instead of waiting for the next multiple of a
// short period; give the task a deadline, or the window is a day.
func oneShot(lead time.Duration) (string, time.Time) {
	at := time.Now().Add(lead).Truncate(time.Second).Add(time.Second).UTC()
	return fmt.Sprintf("%d %d %d * * *", at.Second(), at.Minute(), at.Hour()), at
}

// logRec is one JSON line of a replica's log.
type logRec map[string]any

func (r logRec) msg() string { return r.str("msg") }

func (r logRec) str(k string) string {
	s, _ := r[k].(string)
	return s
}

func (r logRec) num(k string) float64 {
	f, _ := r[k].(float64)
	return f
}

func (r logRec) time() time.Time {
	t, _ := time.Parse(time.RFC3339Nano, r.str("time"))
	return t
}

// records parses the replica's log; lines that are not JSON objects (a
// line still being written) are skipped.
func (r *replica) records() []logRec {
	var out []logRec
	for line := range strings.Lines(r.log()) {
		var rec logRec
		if json.Unmarshal([]byte(line), &rec) == nil {
			out = append(out, rec)
		}
	}
	return out
}

func (r *replica) hasLog(cond func(logRec) bool) bool {
	for _, rec := range r.records() {
		if cond(rec) {
			return true
		}
	}
	return false
}

// awaitLog polls the replica's log until a record satisfies cond, and
// returns it; it fails the test if none does within timeout.
func (r *replica) awaitLog(what string, timeout time.Duration, cond func(logRec) bool) logRec {
	r.t.Helper()
	var found logRec
	awaitPoll(r.t, "replica "+r.name+": a log line for "+what, timeout, r.records,
		func(recs []logRec) bool {
			for _, rec := range recs {
				if cond(rec) {
					found = rec
					return true
				}
			}
			return false
		},
		func([]logRec) string { return "its log ends:\n" + tail(r.log(), 20) })
	return found
}

// firstAttempt waits for some slot's attempt 1 and returns its start and
// the replica running it.
func (c *cluster) firstAttempt() (event, *replica) {
	c.t.Helper()
	evs := c.ledger.await("attempt 1", 15*time.Second, func(evs []event) bool { return len(find(evs, "start", 1)) > 0 })
	first := find(evs, "start", 1)[0]
	return first, c.replica(first.Replica)
}

// freeze stops a replica and its task's process group with SIGSTOP, as a
// VM pause would, and returns when; cleanup thaws both, so that a failed
// test never leaves a stopped process behind.
func freeze(t *testing.T, r *replica, pgid int) time.Time {
	t.Helper()
	at := time.Now()
	r.Signal(syscall.SIGSTOP)
	_ = syscall.Kill(-pgid, syscall.SIGSTOP)
	t.Cleanup(func() {
		_ = syscall.Kill(-pgid, syscall.SIGCONT)
		_ = syscall.Kill(r.pid(), syscall.SIGCONT)
	})
	return at
}

// awaitStarted waits until every replica of c has logged "scheduler started".
func (c *cluster) awaitStarted(timeout time.Duration) {
	c.t.Helper()
	for _, r := range c.reps {
		r.awaitLog("scheduler started", timeout, func(rec logRec) bool { return rec.msg() == "scheduler started" })
	}
}

// metric reads one sample (name{labels} exactly as exposed) from the
// replica's /metrics; 0 if absent.
func (r *replica) metric(t *testing.T, sample string) float64 {
	t.Helper()
	code, body, err := httpGet(r.httpAddr(10*time.Second), "/metrics")
	if err != nil || code != 200 {
		t.Fatalf("replica %s: GET /metrics: %d %v", r.name, code, err)
	}
	for line := range strings.Lines(body) {
		if rest, ok := strings.CutPrefix(line, sample+" "); ok {
			var v float64
			if _, err := fmt.Sscan(rest, &v); err == nil {
				return v
			}
		}
	}
	return 0
}

// awaitGroupGone waits until no live process is left in process group
// pgid. Zombies (dead, not yet reaped by whoever inherited them) do not
// count: they run nothing.
func awaitGroupGone(t *testing.T, pgid int, timeout time.Duration) {
	t.Helper()
	awaitPoll(t, fmt.Sprintf("process group %d to be gone", pgid), timeout,
		func() []int { return groupMembers(pgid) },
		func(live []int) bool { return len(live) == 0 },
		func(live []int) string { return fmt.Sprintf("processes %v still alive", live) })
}

// groupMembers lists the pids of the processes of group pgid that are not
// zombies, from /proc/<pid>/stat.
func groupMembers(pgid int) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces and parens.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 3 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		if g, err := strconv.Atoi(f[2]); err == nil && g == pgid {
			pids = append(pids, pid)
		}
	}
	return pids
}

// keysWithoutTTL scans every key in the cluster's Redis and reports those
// without a TTL (PTTL -1). Keys that vanish between SCAN and PTTL are fine.
func (c *cluster) keysWithoutTTL() (bad []string, total int) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	iter := c.rdb.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		total++
		k := iter.Val()
		d, err := c.rdb.PTTL(ctx, k).Result()
		if err != nil {
			c.t.Fatalf("redis PTTL %s: %v", k, err)
		}
		if d == -1 { // -2 would be a key gone since the scan
			bad = append(bad, k)
		}
	}
	if err := iter.Err(); err != nil && !errors.Is(err, context.Canceled) {
		c.t.Fatalf("redis SCAN: %v", err)
	}
	return bad, total
}
