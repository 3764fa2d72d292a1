package cli

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// `slotd validate` prints no piece of a Redis password from a malformed
// url, url_env or redlock item (net/url quoted `":s3cr"`, or the whole
// password when the URL ended in /), and exits 2.
func TestValidateNeverQuotesRedisPassword(t *testing.T) {
	const password = "Pw9Xk3Vj"
	dir := t.TempDir()
	for _, u := range []string{
		"redis://slotd:" + password + "/",
		"redis://slotd:Pw9X/k3Vj@db:6379/0",
		"redis://:Pw9X#k3Vj@db:6379",
		"redis://slotd:Pw9X?k3Vj@db:6379",
		"redis://slotd:Pw9X%zzk3Vj@db:6379",
		"redis://slotd:" + password + "@db:6379/" + password,
		"redis://slotd:" + password + "@db:6379?dial_timeout=" + password,
		"slotd:" + password + "@db:6379",
	} {
		for key, line := range map[string]string{
			"url":     "url = " + strconv.Quote(u),
			"url_env": `url_env = "SLOTD_TEST_URL"`,
			"redlock": `redlock = ["redis://a:1", ` + strconv.Quote(u) + `, "redis://c:1"]`,
		} {
			t.Setenv("SLOTD_TEST_URL", u)
			path := filepath.Join(dir, key+".toml")
			if err := os.WriteFile(path, []byte("[redis]\n"+line+"\n"+sharedTasks), 0o644); err != nil {
				t.Fatal(err)
			}
			r := runCLI(t, "validate", "-config", path)
			if r.code != exitUsage || !strings.Contains(r.stderr, "invalid Redis URL") {
				t.Errorf("%s = %q: %v; want exit 2 and an invalid Redis URL error", key, u, r)
			}
			for i := 0; i+3 <= len(password); i++ {
				if piece := password[i : i+3]; strings.Contains(r.stdout+r.stderr, piece) {
					t.Errorf("%s = %q: the output quotes %q of the password:\n%v", key, u, piece, r)
					break
				}
			}
		}
	}
}

// `slotd validate` shows what it resolved: H from the task's name, the
// union's fire times, the bounds, each slot's jittered start, and a
// concurrency policy other than allow.
func TestValidateShowsResolvedTimes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "slotd.toml")
	src := `
[daemon]
max_running = 20

[[task]]
name = "spread"
schedule = "H H(0-5) * * *"
jitter = "30s"
max_attempts = 4
retry_backoff = { initial = "10s", multiplier = 3, jitter = 0.1 }
plugin = "exec"
params = { command = ["true"] }

[[task]]
name = "month-end"
schedules = ["0 18 LW * *", "0 9 * * 1#1"]
active_from = "2026-01-01T00:00:00Z"
active_until = "2099-06-30T00:00:00Z"
concurrency = "queue"
plugin = "exec"
params = { command = ["true"] }

[[task]]
name = "over"
schedule = "@hourly"
active_until = "2001-01-01T00:00:00Z"
plugin = "exec"
params = { command = ["true"] }
`
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, "validate", "-config", path, "-n", "4")
	if r.code != exitOK {
		t.Fatalf("validate: %v", r)
	}
	for _, want := range []string{
		`task spread: schedule "H H(0-5) * * *"`,
		"  resolved: \"",
		"  jitter: 30s",
		"  retry_backoff: 10s, 30s, 1m30s after failed attempts 1, 2, ... (±0.1 each",
		"task month-end: schedule \"0 18 LW * *; 0 9 * * 1#1\"",
		"  active: 2026-01-01T00:00:00Z to 2099-06-30T00:00:00Z",
		"  concurrency: queue (a slot fired while the previous one runs waits and starts when it ends",
		"task over: schedule \"@hourly\"",
		"  no more fire times",
		", max_running 20",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}
	if n := strings.Count(r.stdout, "  concurrency: "); n != 1 {
		t.Errorf("%d concurrency lines, want 1 (allow is not shown):\n%s", n, r.stdout)
	}
	// Every fire line of the jittered task shows a start after its slot
	// time and within 30 s of it.
	var starts int
	for _, line := range strings.Split(r.stdout, "\n") {
		if !strings.Contains(line, "start ") {
			continue
		}
		f := strings.Fields(line)
		slot, err1 := time.Parse(time.RFC3339, f[0])
		start, err2 := time.Parse(time.RFC3339, f[len(f)-2])
		if err1 != nil || err2 != nil || start.Before(slot) || start.Sub(slot) >= 30*time.Second {
			t.Errorf("line %q: slot %v, start %v", line, slot, start)
		}
		starts++
	}
	if starts != 4 {
		t.Errorf("%d jittered starts shown, want 4:\n%s", starts, r.stdout)
	}
}
