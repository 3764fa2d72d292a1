package integration

// Process faults (issue 16 items 1 and SIGHUP): what becomes of a task's
// processes when its daemon dies, and of the daemon on SIGHUP.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// treeTask is a task that starts a process tree before working for 5s: a
// subshell, a double-forked worker (its parent exits at once, so it is
// reparented), and a setsid worker in a session and group of its own, each appending a tick
// ("child", "orphan", "setsid") to the ledger every 100ms with the
// attempt's variables; $$ in a worker's line is its own pid.
func (c *cluster) treeTask(name, schedule, extra string) string {
	worker := filepath.Join(c.t.TempDir(), "worker.sh")
	if err := os.WriteFile(worker, []byte(recordFn+`while :; do rec "$1"; sleep 0.1; done`+"\n"), 0o644); err != nil {
		c.t.Fatal(err)
	}
	return c.execTask(name, schedule, fmt.Sprintf(`rec start
( while :; do rec child; sleep 0.1; done ) &
( /bin/sh %[1]s orphan & ) &
setsid /bin/sh %[1]s setsid &
sleep 5
rec end
`, q(worker)), extra)
}

// Scenario: the winner is killed (kill -9, its process group, as a crash
// or the OOM killer would) while its task's process tree runs, part of it
// outside the task's process group and session. Every process of the tree
// is gone within lease/3 of the kill — long before the lease runs out —
// and the peer's attempt 2 starts only after the last line any attempt-1
// process wrote: attempt 1 does not overlap its retry.
func TestKill9WinnerKillsTaskTree(t *testing.T) {
	t.Parallel()
	const lease = 3 * time.Second
	c := newCluster(t)
	spec, _ := oneShot(3 * time.Second)
	c.start(2, "1s", `lease = "3s"
max_attempts = 3
timeout = "1m"
catchup = "latest"`,
		c.treeTask("tree", spec, `deadline = "30s"`))
	c.awaitStarted(10 * time.Second)

	evs := c.ledger.await("attempt 1's whole tree to tick", 20*time.Second, func(evs []event) bool {
		return len(find(evs, "child", 1)) > 0 && len(find(evs, "orphan", 1)) > 0 && len(find(evs, "setsid", 1)) > 0
	})
	first := find(evs, "start", 1)[0]
	victim := c.replica(first.Replica)
	setsid := find(evs, "setsid", 1)[0].PGID // its own pid, group and session
	if sid, _, e := syscall.RawSyscall(syscall.SYS_GETSID, uintptr(setsid), 0, 0); e != 0 || int(sid) != setsid {
		t.Fatalf("setsid worker %d: session %d (%v), want its own", setsid, sid, e)
	}
	tree := marked(victim.mark)
	for _, pid := range []int{first.PGID, find(evs, "orphan", 1)[0].PGID, setsid} {
		if !slices.Contains(tree, pid) {
			t.Fatalf("process %d of attempt 1 is not among the victim's processes %v", pid, tree)
		}
	}
	t.Logf("attempt 1 on %s: %d processes besides the daemon", victim.name, len(tree)-1)

	victim.Kill9()
	killAt := time.Now()
	left := awaitPoll(t, "attempt 1's processes to be gone", lease, func() []int { return marked(victim.mark) },
		func(pids []int) bool { return len(pids) == 0 },
		func(pids []int) string { return fmt.Sprintf("alive: %v", pids) })
	goneAt := time.Now()
	t.Logf("attempt 1's processes gone %v after the kill", goneAt.Sub(killAt))
	if d := goneAt.Sub(killAt); d > lease/3 {
		t.Errorf("attempt 1's processes gone %v after the kill, want within lease/3 = %v (%v)", d, lease/3, left)
	}

	evs = c.ledger.await("the peer's attempt 2", lease+10*time.Second, func(evs []event) bool {
		return len(find(evs, "start", 2)) > 0
	})
	second := find(evs, "start", 2)[0]
	if second.Replica == victim.name {
		t.Fatalf("attempt 2 ran on the killed replica")
	}
	// Give a straggler of attempt 1, if any, time to show in the ledger.
	time.Sleep(500 * time.Millisecond)
	evs = c.ledger.read()
	var last event
	for _, e := range evs {
		if e.Attempt == 1 && e.At.After(last.At) {
			last = e
		}
	}
	t.Logf("attempt 2 on %s %v after the kill; attempt 1's last line (%s) %v before it",
		second.Replica, second.At.Sub(killAt), last.Kind, second.At.Sub(last.At))
	if !last.At.Before(second.At) {
		t.Errorf("attempt 1 wrote after attempt 2 started:\n%s", dump(evs))
	}
	if last.At.After(goneAt) {
		t.Errorf("attempt 1 wrote at %s, after its processes were seen gone at %s", last.At.Format("15:04:05.000"), goneAt.Format("15:04:05.000"))
	}
	if len(find(evs, "end", 1)) != 0 {
		t.Errorf("attempt 1 ended although its daemon was killed:\n%s", dump(evs))
	}

	// Attempt 2 ends on its own; what it started goes with it.
	evs = c.ledger.await("attempt 2 to end", 15*time.Second, func(evs []event) bool {
		return len(find(evs, "end", 2)) > 0
	})
	end := find(evs, "end", 2)[0]
	c.awaitKey(stateKey("tree", second.Slot), "to be done by attempt 2", 5*time.Second, func(v string, _ bool) bool {
		return strings.HasPrefix(v, "done:"+second.Replica+":2:")
	})
	time.Sleep(500 * time.Millisecond)
	for _, e := range c.ledger.read() {
		// A tick already under way when the shell exited may land just after.
		if e.Attempt == 2 && e.At.After(end.At.Add(200*time.Millisecond)) {
			t.Errorf("attempt 2's %s (pid %d) wrote %v after attempt 2 ended", e.Kind, e.PGID, e.At.Sub(end.At))
		}
	}
	c.stopAll()
}

// SIGHUP reloads the daemon's configuration instead of stopping it (it
// used to exit with 129, without its shutdown, leaving its running slot
// held until the lease ran out): a valid file's added task starts; an
// invalid file is refused, logged and counted, and the daemon goes on with
// the running configuration; the unchanged task loses and doubles no slot
// across the reloads; SIGTERM then stops it as usual, exit status 0.
func TestSighupReloads(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	defaults := `lease = "3s"
timeout = "1m"
catchup = "none"`
	hup := c.execTask("hup", "@every 1s", `rec start; sleep 0.2; rec end`, `deadline = "10s"`)
	c.start(1, "1s", defaults, hup)
	c.awaitStarted(10 * time.Second)
	r := c.reps[0]
	path := r.cmd.Args[len(r.cmd.Args)-1]
	rewrite := func(tasks ...string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(config(r.name, c.srv.URL(), "1s", defaults, tasks...)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c.ledger.await("a first run", 10*time.Second, func(evs []event) bool { return len(find(evs, "end", 0)) > 0 })

	addedAt := time.Now()
	rewrite(hup, c.execTask("added", "@every 1s", `rec start; rec end`, ""))
	r.Signal(syscall.SIGHUP)
	r.awaitLog("the reload", 10*time.Second, func(rec logRec) bool {
		added, _ := rec["added"].([]any)
		return rec.msg() == "configuration reloaded" && len(added) == 1 && added[0] == "added"
	})
	c.ledger.await("the added task's first run", 10*time.Second, func(evs []event) bool {
		for _, e := range find(evs, "end", 0) {
			if e.Task == "added" {
				return true
			}
		}
		return false
	})
	for _, e := range c.ledger.read() {
		if e.Task == "added" && !slotTime(t, e.Slot).After(addedAt.Add(-time.Second)) {
			t.Errorf("the added task ran slot %s, from before the reload", e.Slot)
		}
	}

	rewrite(hup, c.execTask("broken", "every second", `rec start`, ""))
	badAt := time.Now()
	r.Signal(syscall.SIGHUP)
	r.awaitLog("the refused reload", 10*time.Second, func(rec logRec) bool {
		return rec.msg() == "configuration reload failed: the running configuration stays" &&
			rec.str("level") == "ERROR" && strings.Contains(rec.str("err"), `task "broken"`)
	})
	c.ledger.await("two runs of each task started and ended after the invalid file", 10*time.Second, func(evs []event) bool {
		n := map[string]int{}
		for _, e := range find(evs, "end", 0) {
			if e.At.After(badAt) {
				n[e.Task]++
			}
		}
		return n["hup"] >= 2 && n["added"] >= 2
	})
	if !r.running() {
		t.Fatalf("replica exited after SIGHUP: %v", r.cmd.ProcessState)
	}
	for name, want := range map[string]float64{"slotd_config_reload_failures_total": 1, "slotd_config_reloads_total": 1} {
		if got := r.metric(t, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	c.stopAll()
	slots := map[string]int{}
	var first, last time.Time
	for _, e := range find(c.ledger.read(), "start", 0) {
		if e.Task != "hup" {
			continue
		}
		slots[e.Slot]++
		at := slotTime(t, e.Slot)
		if first.IsZero() || at.Before(first) {
			first = at
		}
		if at.After(last) {
			last = at
		}
	}
	for at := first; !at.After(last); at = at.Add(time.Second) {
		if n := slots[at.UTC().Format("20060102150405")]; n != 1 {
			t.Errorf("slot %s of the unchanged task started %d times, want once", at.Format(time.TimeOnly), n)
		}
	}
}

// Both binaries answer the supervisor's hidden argument from package
// tasks, before their command line: started by hand, without its pipes,
// the supervisor refuses (exit 125) rather than run slotd, which would
// reject an unknown command (exit 2) or, in a build with another main,
// do whatever that main does — start tasks, and supervisors, of its own.
func TestSuperviseDispatchInBinaries(t *testing.T) {
	t.Parallel()
	custom := built(t, "./cmd/slotd-custom")
	for _, bin := range []string{slotdBin, custom} {
		out, err := exec.Command(bin, "__supervise", "/bin/sh", "sh", "-c", "echo ran").CombinedOutput()
		if code := exitCode(err); code != 125 || !strings.Contains(string(out), "internal supervisor of exec tasks") {
			t.Errorf("%s __supervise: exit %d, output %q; want 125 and the supervisor's refusal", filepath.Base(bin), code, out)
		}
	}
}

// Three `slotd run` processes are sent SIGHUP every half second for 8 s,
// each time with a file that adds, changes or removes a second task: the
// unchanged every-second task starts each of its slots exactly once over
// the whole run, and the churned one at most once.
func TestSighupChurnKeepsEverySlotOnce(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	defaults := `lease = "3s"
timeout = "1m"
catchup = "none"
deadline = "10s"`
	tick := c.execTask("tick", "@every 1s", `rec start; rec end`, "")
	c.start(3, "1s", defaults, tick)
	c.awaitStarted(10 * time.Second)
	c.ledger.await("a first tick", 10*time.Second, func(evs []event) bool { return len(find(evs, "end", 0)) > 0 })
	churn := func(n int) []string {
		switch n % 3 {
		case 0:
			return []string{tick, c.execTask("churn", "@every 1s", `rec start; rec end`, "")}
		case 1:
			return []string{tick, c.execTask("churn", "@every 1s", `rec start; rec end # changed`, "")}
		}
		return []string{tick}
	}
	start := time.Now()
	for n := 0; time.Since(start) < 8*time.Second; n++ {
		for _, r := range c.reps {
			path := r.cmd.Args[len(r.cmd.Args)-1]
			if err := os.WriteFile(path, []byte(config(r.name, c.srv.URL(), "1s", defaults, churn(n)...)), 0o644); err != nil {
				t.Fatal(err)
			}
			r.Signal(syscall.SIGHUP)
		}
		time.Sleep(500 * time.Millisecond) // the pace of the reloads, not a wait for an event
	}
	end := time.Now()
	c.ledger.await("a tick after the reloads", 10*time.Second, func(evs []event) bool {
		for _, e := range find(evs, "end", 0) {
			if e.Task == "tick" && slotTime(t, e.Slot).After(end) {
				return true
			}
		}
		return false
	})
	for _, r := range c.reps {
		if !r.running() {
			t.Fatalf("replica %s exited during the reloads: %v", r.name, r.cmd.ProcessState)
		}
	}
	c.stopAll()
	starts := map[string]map[string]int{"tick": {}, "churn": {}}
	var first, last time.Time
	for _, e := range find(c.ledger.read(), "start", 0) {
		starts[e.Task][e.Slot]++
		if e.Task != "tick" {
			continue
		}
		at := slotTime(t, e.Slot)
		if first.IsZero() || at.Before(first) {
			first = at
		}
		if at.After(last) {
			last = at
		}
	}
	for at := first; !at.After(last); at = at.Add(time.Second) {
		if n := starts["tick"][at.UTC().Format("20060102150405")]; n != 1 {
			t.Errorf("tick slot %s started %d times, want once", at.Format(time.TimeOnly), n)
		}
	}
	for slot, n := range starts["churn"] {
		if n != 1 {
			t.Errorf("churn slot %s started %d times, want at most once", slot, n)
		}
	}
	if len(starts["churn"]) == 0 {
		t.Error("the churned task never ran")
	}
	reloaded := 0
	for _, r := range c.reps {
		for _, rec := range r.records() {
			if rec.msg() == "configuration reloaded" {
				reloaded++
			}
		}
	}
	t.Logf("%d reloads applied across 3 replicas; %d tick slots, %d churn slots", reloaded, len(starts["tick"]), len(starts["churn"]))
	if reloaded < 3*8 {
		t.Errorf("%d reloads applied, want at least 24 (16 SIGHUPs to each of 3 replicas; two close together may count once)", reloaded)
	}
}
