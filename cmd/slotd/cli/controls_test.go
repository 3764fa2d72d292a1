package cli

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/lock"
)

const cliToken = "cli-test-token-0123456789"

// A daemon on the embedded store takes trigger, pause and resume through
// its API: the trigger runs once (an exec task whose environment lacks the
// token's variable), the same key again starts nothing.
func TestControlsOnEmbeddedDaemon(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "runs")
	port := redistest.FreePort(t)
	t.Setenv("SLOTD_CLI_TEST_TOKEN", cliToken)
	path := filepath.Join(dir, "slotd.toml")
	src := fmt.Sprintf(`[http]
listen = "127.0.0.1:%d"
token_env = "SLOTD_CLI_TEST_TOKEN"

[log]
format = "json"

[[task]]
name = "yearly"
schedule = "0 0 1 1 *"
deadline = "10m"
plugin = "exec"
catchup = "none"
  [task.params]
  command = ["sh", "-c", "n=$(env | grep -c SLOTD_CLI_TEST_TOKEN); echo \"run $SLOTD_TASK $SLOTD_SLOT $SLOTD_ATTEMPT $n\" >> %s"]
`, port, out)
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() { done <- Main(ctx, []string{"run", "-config", path}, &stdout, &stderr) }()
	defer func() {
		cancel()
		if code := <-done; code != exitOK {
			t.Errorf("run exited %d:\n%s", code, stderr.String())
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(stderr.String(), "http listening") {
		if time.Now().After(deadline) {
			t.Fatalf("the daemon did not start:\n%s", stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}

	r := runCLI(t, "trigger", "-config", path, "-key", "k1", "yearly")
	if r.code != exitOK || !strings.Contains(r.stdout, "triggered yearly: slot ") {
		t.Fatalf("trigger: %v", r)
	}
	var runs string
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(runs, "\n"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the triggered run did not happen; log:\n%s", stderr.String())
		}
		b, _ := os.ReadFile(out)
		runs = string(b)
	}
	// The token's variable (set in the daemon's environment) is not in the
	// task's: n = 0.
	if f := strings.Fields(runs); len(f) != 5 || f[1] != "yearly" || !(lock.Slot{ID: f[2]}).Triggered() || f[3] != "1" || f[4] != "0" {
		t.Fatalf("runs = %q; want one run of a triggered slot at attempt 1, without the token's variable", runs)
	}
	if strings.Contains(stderr.String(), cliToken) {
		t.Error("the daemon logged its token")
	}
	r = runCLI(t, "trigger", "-config", path, "-key", "k1", "yearly")
	if r.code != exitOK || !strings.Contains(r.stdout, "already triggered") {
		t.Errorf("trigger with the same key: %v", r)
	}
	if r = runCLI(t, "pause", "-config", path, "yearly"); r.code != exitOK || !strings.Contains(r.stdout, "paused yearly") {
		t.Errorf("pause: %v", r)
	}
	if r = runCLI(t, "resume", "-config", path, "yearly"); r.code != exitOK || !strings.Contains(r.stdout, "resumed yearly") {
		t.Errorf("resume: %v", r)
	}
	// A task added by a reload can be triggered at once.
	added := src + strings.Replace(src[strings.Index(src, "[[task]]"):], `name = "yearly"`, `name = "added"`, 1)
	if err := os.WriteFile(path, []byte(added), 0o644); err != nil {
		t.Fatal(err)
	}
	if r = runCLI(t, "reload", "-config", path); r.code != exitOK || !strings.Contains(r.stdout, "reloaded") {
		t.Fatalf("reload: %v\n%s", r, stderr.String())
	}
	if r = runCLI(t, "trigger", "-config", path, "added"); r.code != exitOK || !strings.Contains(r.stdout, "triggered added") {
		t.Errorf("trigger of a task added by the reload: %v", r)
	}
	// An invalid file: here, the daemon is not asked (exit 2); in the
	// daemon's own file (the command read a valid copy), it refuses with 422
	// (exit 1). Either way the error names the task and key.
	valid := filepath.Join(dir, "copy.toml")
	if err := os.WriteFile(valid, []byte(added), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(added+"\n[[task]]\nname = \"bad\"\nschedule = \"every hour\"\nplugin = \"exec\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r = runCLI(t, "reload", "-config", path); r.code != exitUsage || !strings.Contains(r.stderr, "the daemon was not asked") || !strings.Contains(r.stderr, `task "bad"`) {
		t.Errorf("reload of an invalid file: %v; want exit 2 naming task \"bad\", the daemon not asked", r)
	}
	if r = runCLI(t, "reload", "-config", valid); r.code != exitError || !strings.Contains(r.stderr, "422") ||
		!strings.Contains(r.stderr, "running config stays") || !strings.Contains(r.stderr, `task "bad"`) {
		t.Errorf("reload the daemon refuses: %v; want exit 1 with its 422 naming task \"bad\"", r)
	}
	if err := os.WriteFile(path, []byte(added), 0o644); err != nil {
		t.Fatal(err)
	}
	if r = runCLI(t, "trigger", "-config", path, "nope"); r.code != exitUsage || !strings.Contains(r.stderr, `no task "nope"`) {
		t.Errorf("trigger of an unknown task: %v; want exit 2", r)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		b, _ := os.ReadFile(out)
		got := strings.Count(string(b), "run ")
		if got > 2 || (got < 2 && time.Now().After(deadline)) {
			t.Fatalf("%d runs, want 2 (yearly's once, added's once): %q", got, b)
		}
		if got == 2 {
			if !strings.Contains(string(b), "run added ") {
				t.Errorf("no run of the added task: %q", b)
			}
			break
		}
	}
}

// Exit codes: usage and config problems 2, a daemon that is not there 1;
// pause and resume on Redis write the store with no daemon running.
func TestControlsExitCodes(t *testing.T) {
	s := newShared(t)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"trigger", "-config", s.path}, exitUsage, "want 1 arguments"},
		{[]string{"pause", "-config", s.path, "a", "b"}, exitUsage, "want 1 arguments"},
		{[]string{"reload", "-config", s.path, "x"}, exitUsage, "unexpected argument"},
		{[]string{"trigger", "-config", s.path, "report"}, exitUsage, `listen = "off"`},
		{[]string{"pause", "-config", s.path, "nope"}, exitUsage, `no task "nope"`},
		{[]string{"trigger", "-config", filepath.Join(t.TempDir(), "missing.toml"), "report"}, exitUsage, "missing.toml"},
	} {
		if r := runCLI(t, tc.args...); r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: %v; want exit %d saying %q", tc.args, r, tc.code, tc.want)
		}
	}
	ctx := context.Background()
	if r := runCLI(t, "pause", "-config", s.path, "report"); r.code != exitOK || !strings.Contains(r.stdout, "paused report") {
		t.Fatalf("pause: %v", r)
	}
	if p, err := s.store.Paused(ctx, []string{"report", "backup"}, false); err != nil || !p[0] || p[1] {
		t.Fatalf("pause states = %v, %v; want report alone paused", p, err)
	}
	if r := runCLI(t, "status", "-config", s.path, "-n", "1"); r.code != exitOK || strings.Count(r.stdout, "PAUSED") != 1 {
		t.Errorf("status of a paused task: %v; want report alone shown paused", r)
	}
	if r := runCLI(t, "resume", "-config", s.path, "report"); r.code != exitOK || !strings.Contains(r.stdout, "resumed report") {
		t.Fatalf("resume: %v", r)
	}
	if p, err := s.store.Paused(ctx, []string{"report"}, false); err != nil || p[0] {
		t.Fatalf("pause state after resume = %v, %v", p, err)
	}

	// A daemon's address with nobody listening: exit 1; without a token: 2.
	port := redistest.FreePort(t)
	noToken := filepath.Join(t.TempDir(), "slotd.toml")
	withToken := filepath.Join(t.TempDir(), "slotd.toml")
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(cliToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for p, http := range map[string]string{
		noToken:   fmt.Sprintf("[http]\nlisten = \"127.0.0.1:%d\"\n", port),
		withToken: fmt.Sprintf("[http]\nlisten = \"127.0.0.1:%d\"\ntoken_file = %q\n", port, tokenFile),
	} {
		if err := os.WriteFile(p, []byte(http+sharedTasks), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if r := runCLI(t, "reload", "-config", noToken); r.code != exitUsage || !strings.Contains(r.stderr, "token_file or token_env") {
		t.Errorf("reload without a token: %v; want exit 2", r)
	}
	if r := runCLI(t, "trigger", "-config", withToken, "report"); r.code != exitError || !strings.Contains(r.stderr, "no daemon answers") {
		t.Errorf("trigger with no daemon: %v; want exit 1", r)
	}
}

func TestUsageListsEveryCommand(t *testing.T) {
	r := runCLI(t, "help")
	for _, cmd := range []string{"run", "validate", "status", "history", "rerun", "trigger", "backfill", "pause", "resume", "reload", "healthcheck", "version"} {
		if !strings.Contains(r.stdout, "\n  "+cmd+" ") {
			t.Errorf("usage does not list %s:\n%s", cmd, r.stdout)
		}
	}
}

// slotd backfill asks the daemon on the embedded store to run a past
// range's slots: each runs once (as its scheduled slot, attempt 1), the
// history says backfilled, the same request again runs nothing, and bad
// input exits 2 naming the value.
func TestBackfillCommand(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "runs")
	port := redistest.FreePort(t)
	t.Setenv("SLOTD_CLI_TEST_TOKEN", cliToken)
	path := filepath.Join(dir, "slotd.toml")
	src := fmt.Sprintf(`[http]
listen = "127.0.0.1:%d"
token_env = "SLOTD_CLI_TEST_TOKEN"

[log]
format = "json"

[[task]]
name = "hourly"
schedule = "0 * * * *"
plugin = "exec"
catchup = "none"
  [task.params]
  command = ["sh", "-c", "echo \"run $SLOTD_SLOT $SLOTD_ATTEMPT\" >> %s"]
`, port, out)
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	to := time.Now().UTC().Truncate(time.Hour)
	from, toArg := to.Add(-3*time.Hour).Format(time.RFC3339), to.Format(time.RFC3339)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"backfill", "-config", path, "hourly", from}, "want 3 arguments"},
		{[]string{"backfill", "-config", path, "hourly", "last week", toArg}, `FROM "last week"`},
		{[]string{"backfill", "-config", path, "hourly", toArg, from}, "is not before TO"},
		{[]string{"backfill", "-config", path, "nope", from, toArg}, `no task "nope"`},
	} {
		if r := runCLI(t, tc.args...); r.code != exitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: %v; want exit 2 saying %q", tc.args, r, tc.want)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() { done <- Main(ctx, []string{"run", "-config", path}, &stdout, &stderr) }()
	defer func() {
		cancel()
		if code := <-done; code != exitOK {
			t.Errorf("run exited %d:\n%s", code, stderr.String())
		}
	}()
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(stderr.String(), "http listening"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the daemon did not start:\n%s", stderr.String())
		}
	}
	r := runCLI(t, "backfill", "-config", path, "hourly", to.Add(-3*time.Hour).Format(time.DateTime)+"x", toArg)
	if r.code != exitUsage {
		t.Errorf("backfill with a bad FROM: %v; want exit 2", r)
	}
	if r = runCLI(t, "backfill", "-config", path, "hourly", from, to.Add(2*time.Hour).Format(time.RFC3339)); r.code != exitError || !strings.Contains(r.stderr, "in the future") {
		t.Errorf("backfill into the future: %v; want exit 1 saying so", r)
	}
	// The daemon's HTTP server listens a moment before its scheduler's
	// loop runs: until then a backfill is answered 503, not running yet.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		r = runCLI(t, "backfill", "-config", path, "hourly", from, toArg)
		if !strings.Contains(r.stderr, "not running yet") || time.Now().After(deadline) {
			break
		}
	}
	if r.code != exitOK || !strings.Contains(r.stdout, "backfilling hourly: 3 slots") {
		t.Fatalf("backfill: %v", r)
	}
	var runs []string
	for deadline := time.Now().Add(20 * time.Second); len(runs) < 3; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the backfill ran %d slots of 3; log:\n%s", len(runs), stderr.String())
		}
		b, _ := os.ReadFile(out)
		runs = strings.Split(strings.TrimSpace(string(b)), "\n")
		if runs[0] == "" {
			runs = nil
		}
	}
	seen := map[string]bool{}
	for _, line := range runs {
		f := strings.Fields(line)
		if len(f) != 3 || f[2] != "1" || seen[f[1]] || f[1] < to.Add(-3*time.Hour).Format("2006010215") || f[1] >= to.Format("2006010215") {
			t.Fatalf("runs %q: want each of the 3 slots once, as attempt 1", runs)
		}
		seen[f[1]] = true
	}
	// The embedded store's history lives in the daemon: read it there.
	var hist string
	for deadline := time.Now().Add(10 * time.Second); strings.Count(hist, `"backfilled": true`) < 3; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("history does not show 3 backfilled attempts: %s", hist)
		}
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/api/v1/tasks/hourly/history", port))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		hist = string(b)
	}
	if r = runCLI(t, "backfill", "-config", path, "hourly", from, toArg); r.code != exitOK {
		t.Fatalf("backfill again: %v", r)
	}
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(stderr.String(), `"backfill finished"`) || strings.Count(stderr.String(), `"backfill finished"`) < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the second backfill did not finish; log:\n%s", stderr.String())
		}
	}
	if b, _ := os.ReadFile(out); strings.Count(string(b), "\n") != 3 {
		t.Errorf("after the same backfill again, runs = %q; want the 3 runs of the first only", b)
	}
}
