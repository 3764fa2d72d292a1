package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/redistest"
)

// chromium returns the path of Debian's headless-capable chromium. Without
// it the test is skipped — except under CI=true, where .ci/run installs it
// and its absence is a failure.
func chromium(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("chromium not found under CI (.ci/run installs it): %v", err)
		}
		t.Skipf("chromium not installed (apt-get install -y --no-install-recommends chromium): %v", err)
	}
	return path
}

// dumpDOM loads url in headless chromium and returns the DOM it built. The
// browser runs in a process group of its own, which is killed afterwards
// so that none of its helper processes outlive the test.
func dumpDOM(t *testing.T, bin, url string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	home := t.TempDir()
	cmd := exec.CommandContext(ctx, bin,
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
		"--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir="+t.TempDir(), "--dump-dom", url)
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+home, "XDG_CACHE_HOME="+home)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	err := cmd.Run()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // helpers left in its group, if any
	}
	if err != nil {
		var xe *exec.ExitError
		if ctx.Err() != nil || !errors.As(err, &xe) || stdout.Len() == 0 {
			t.Fatalf("chromium --dump-dom %s: %v\nstderr:\n%s", url, err, tail(stderr.String(), 30))
		}
	}
	t.Logf("chromium loaded %s in %v", url, time.Since(start).Round(time.Millisecond))
	return stdout.String()
}

// A real browser shows a slot that a real daemon completed as done on the
// status page: slotd runs an exec task every second against a real
// redis-server, and headless chromium loads the page from its HTTP port.
func TestStatusPageInBrowser(t *testing.T) {
	bin := chromium(t)
	c := newCluster(t)
	port := redistest.FreePort(t)
	cfg := config("r1", c.srv.URL(), "2s", `lease = "2s"`, c.execTask("tick", "@every 1s", "rec start; rec end", ""))
	listen := fmt.Sprintf(`listen = "127.0.0.1:%d"`, port)
	if cfg = strings.Replace(cfg, `listen = "127.0.0.1:0"`, listen, 1); !strings.Contains(cfg, listen) {
		t.Fatalf("the cluster's config no longer sets [http] listen:\n%s", cfg)
	}
	c.reps = append(c.reps, startReplica(t, "r1", cfg))

	evs := c.ledger.await("a completed slot", 10*time.Second, func(evs []event) bool { return len(find(evs, "end", 0)) > 0 })
	slot := find(evs, "end", 0)[0].Slot
	c.awaitKey(stateKey("tick", slot), "marked done", 5*time.Second, func(v string, ok bool) bool {
		return ok && strings.HasPrefix(v, "done:r1:")
	})

	dom := dumpDOM(t, bin, fmt.Sprintf("http://127.0.0.1:%d/?n=60", port))
	if !strings.Contains(dom, "<h2>tick</h2>") {
		t.Fatalf("the page shows no task tick; DOM:\n%s", tail(dom, 60))
	}
	row := regexp.MustCompile(`(?s)<tr[^>]*data-task="tick" data-slot="` + slot + `" data-phase="([a-z]+)">(.*?)</tr>`).FindStringSubmatch(dom)
	if row == nil {
		t.Fatalf("the page has no row for slot %s of tick; DOM:\n%s", slot, tail(dom, 60))
	}
	if row[1] != "done" || !strings.Contains(row[2], `<span class="badge done">done</span>`) || !strings.Contains(row[2], ">r1<") {
		t.Errorf("slot %s shows as %q, want done by r1; its row:\n%s", slot, row[1], row[2])
	}
	c.stopAll()
}
