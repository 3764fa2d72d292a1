package integration

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Three `slotd run` processes race for a task whose every attempt fails:
// each slot ends exhausted, and the [defaults] on_failure exec hook runs
// once per slot in the fleet, with the failure, the attempts, and the last
// attempt's error and output tail in its environment, and is logged as run.
func TestOnFailureHookOncePerSlot(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	out := filepath.Join(t.TempDir(), "hook.out")
	defaults := `lease = "3s"
timeout = "1m"
max_attempts = 2
catchup = "none"
deadline = "10s"
  [defaults.on_failure]
  plugin = "exec"
  timeout = "10s"
  [defaults.on_failure.params]
  command = ["/bin/sh", "-c", 'echo "$SLOTD_TASK $SLOTD_SLOT $SLOTD_FAILURE $SLOTD_ATTEMPTS ${#SLOTD_LAST_ERROR} $(printf %s "$SLOTD_OUTPUT" | tr -d "\n")" >> "$OUT"']
  [defaults.on_failure.params.env]
  OUT = ` + q(out)
	c.start(3, "1s", defaults, c.execTask("fails", "@every 1s", `rec start; echo oops >&2; exit 3`, ""))
	c.awaitStarted(10 * time.Second)
	read := func() []string {
		b, _ := os.ReadFile(out)
		if len(b) == 0 {
			return nil
		}
		return strings.Split(strings.TrimSpace(string(b)), "\n")
	}
	awaitPoll(t, "three hooks", 30*time.Second, read, func(ls []string) bool { return len(ls) >= 3 },
		func(ls []string) string { return strings.Join(ls, "\n") })
	c.stopAll()
	lines := read()
	starts := bySlot(find(c.ledger.read(), "start", 0))
	seen := map[string]int{}
	for _, line := range lines {
		f := strings.Fields(line)
		if len(f) != 6 {
			t.Fatalf("hook wrote %q", line)
		}
		seen[f[1]]++
		if n, _ := strconv.Atoi(f[4]); f[0] != "fails" || f[2] != "exhausted" || f[3] != "2" || n == 0 || f[5] != "oops" {
			t.Errorf("hook line %q: want task fails, exhausted, 2 attempts, a last error, the output oops", line)
		}
		if len(starts[f[1]]) != 2 {
			t.Errorf("hook ran for slot %s, which started %d attempts, want 2", f[1], len(starts[f[1]]))
		}
	}
	for slot, n := range seen {
		if n != 1 {
			t.Errorf("slot %s: hook ran %d times in the fleet, want once", slot, n)
		}
	}
	var success float64
	for _, r := range c.reps {
		for _, rec := range r.records() {
			if rec.msg() == "on_failure hook ran" {
				success++
			}
		}
	}
	if success != float64(len(lines)) {
		t.Errorf("%v hooks logged as run, want %d", success, len(lines))
	}
}
