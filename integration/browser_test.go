package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image/color"
	"image/png"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/observe"
	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/internal/stats"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/memlock"
	"github.com/slotd/slotd/scheduler"
	"github.com/slotd/slotd/scheduler/history"
	"github.com/slotd/slotd/scheduler/schedule"
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

// A real browser shows a task that a real daemon runs on the overview, and
// a slot it completed as done on the task's page: slotd runs an exec task every second against a real
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

	dom := dumpDOM(t, bin, fmt.Sprintf("http://127.0.0.1:%d/", port))
	if !regexp.MustCompile(`<tr class="task" data-task="tick" data-state="(done|running)">`).MatchString(dom) {
		t.Errorf("the overview does not show tick as done or running; DOM:\n%s", tail(dom, 60))
	}
	dom = dumpDOM(t, bin, fmt.Sprintf("http://127.0.0.1:%d/tasks/tick?n=50", port))
	if !strings.Contains(dom, `<h1 data-task="tick">tick</h1>`) {
		t.Fatalf("the task's page shows no task tick; DOM:\n%s", tail(dom, 60))
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

// xssName is a task name that is markup: every page must show it as text;
// xssOutput is an attempt's output that is markup.
const (
	xssName   = `<img src=x onerror=alert(1)>`
	xssOutput = "starting\n<iframe src=\"javascript:alert(3)\"></iframe>\n<i>done</i>\n"
)

// pageFleet is a daemon's HTTP handler in this process over the embedded
// store, its clock set back while the slots are seeded: hourly tasks in
// every state the overview counts, one of them named with markup and
// failing with markup in its error.
func pageFleet(t *testing.T, extra int) http.Handler {
	t.Helper()
	var mu sync.Mutex
	var offset time.Duration
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return time.Now().Add(offset) }
	st := memlock.New(clock)
	hist := history.NewMemory(0)
	ctx := context.Background()
	cur := time.Now().UTC().Truncate(time.Hour)
	if time.Since(cur) < 2*time.Minute || time.Until(cur.Add(time.Hour)) < 2*time.Minute {
		t.Logf("near the hour: slots may shift while the test runs")
	}
	task := func(name, spec string) scheduler.Task {
		s, err := schedule.Parse(spec, "")
		if err != nil {
			t.Fatal(err)
		}
		return scheduler.Task{Name: name, Spec: spec, Plugin: "exec", Params: map[string]any{},
			Policy:  lock.Policy{Lease: time.Hour, DoneTTL: 48 * time.Hour, MaxAttempts: 3},
			Timeout: time.Minute, Catchup: scheduler.CatchupLatest, Schedule: s}
	}
	var tasks []scheduler.Task
	// attempt runs one attempt of tasks[i]'s slot at at, by the clock
	// then, ending in outcome ("" leaves it running).
	attempt := func(i int, at time.Time, outcome, errText string, output ...string) {
		t.Helper()
		tk := &tasks[i]
		slot := tk.Slot(at)
		mu.Lock()
		offset = time.Until(at.Add(time.Minute))
		mu.Unlock()
		c, err := st.Claim(ctx, slot, "r1", tk.Policy)
		if err != nil || c.Result != lock.Won {
			t.Fatalf("claim %s: %+v %v", slot, c, err)
		}
		owner := lock.Owner{ID: "r1", Attempt: c.Attempt}
		e := scheduler.HistoryEntry{Slot: slot.ID, SlotTime: slot.Time, Attempt: c.Attempt, Token: lock.Token(slot.Time, c.Attempt),
			Replica: "r1", Outcome: stats.Outcome(outcome), Started: clock(), Duration: 1500 * time.Millisecond, Error: errText,
			Output: strings.Join(output, "")}
		switch outcome {
		case "":
			return
		case "success":
			err = st.Complete(ctx, slot, owner, tk.DoneTTL)
		default:
			err = st.Release(ctx, slot, owner)
		}
		if err == nil {
			err = hist.Append(ctx, tk.Name, e)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	prev := cur.Add(-time.Hour)
	for _, s := range []struct{ name, spec string }{
		{"nightly-backup", "@every 1h"}, {xssName, "@every 1h"}, {"sync-users", "@every 1h"}, {"long-etl", "@every 1h"},
		{"hourly-report", "0 * * * *"}, {"cleanup", "@every 1h"}, {"billing-export", "@every 1h"},
	} {
		tasks = append(tasks, task(s.name, s.spec))
	}
	for k := range 3 {
		attempt(0, prev, "failure", fmt.Sprintf("exit status 1: pg_dump: connection refused (attempt %d)", k+1))
	}
	attempt(1, prev, "failure", `<script>alert("pwned")</script> & <b>bold</b>`, xssOutput)
	attempt(2, prev, "success", "")
	attempt(2, cur, "failure", "HTTP 503 from https://api.example.com/users?token=xxxxx")
	attempt(3, prev, "success", "")
	attempt(3, cur, "", "")
	attempt(4, prev, "success", "")
	attempt(4, cur, "success", "")
	attempt(6, prev, "success", "")
	for i := range extra {
		tasks = append(tasks, task(fmt.Sprintf("task-%05d", i), "@every 1h"))
		attempt(len(tasks)-1, prev, "success", "")
	}
	mu.Lock()
	offset = 0
	mu.Unlock()
	sched := scheduler.New(tasks, st, scheduler.WithReplica("r1"), scheduler.WithLogger(slog.New(slog.DiscardHandler)))
	return observe.Handler(observe.Daemon{Scheduler: sched, Store: st, History: hist, Replica: "r1"})
}

// savePNG checks that png is an image of at least minWidth pixels with
// more than a few colours, and keeps it in the test's artifact directory
// (go test -artifacts -outputdir DIR keeps them).
func savePNG(t *testing.T, name string, data []byte, minWidth int) {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	b := img.Bounds()
	colours := map[color.Color]bool{}
	for y := b.Min.Y; y < b.Max.Y && len(colours) < 16; y += 7 {
		for x := b.Min.X; x < b.Max.X; x += 7 {
			colours[img.At(x, y)] = true
		}
	}
	if b.Dx() < minWidth || len(colours) < 16 {
		t.Errorf("screenshot %s: %dx%d with %d colours: blank or unstyled", name, b.Dx(), b.Dy(), len(colours))
	}
	path := filepath.Join(t.ArtifactDir(), name)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s: %dx%d, %s", name, b.Dx(), b.Dy(), path)
}

// Headless chromium shows the overview and a task's page as designed: the
// overview counts every state and lists the failing tasks first, its
// filter works as a plain GET form, the task named with markup shows as
// text on both pages (no element made of it), the policy blocks nothing
// the pages use, and both pages are captured as screenshots. The
// overview of 10,000 tasks loads in the browser in well under a second
// (logged, not asserted: docs/performance.md).
func TestPagesInBrowser(t *testing.T) {
	bin := chromium(t)
	srv := httptest.NewServer(pageFleet(t, 0))
	defer srv.Close()
	b := startBrowser(t, bin, 1280, 800)

	b.navigate(srv.URL + "/")
	var rows []struct{ Name, State string }
	b.eval(`Array.from(document.querySelectorAll("tr.task")).map(function (r) { return {Name: r.dataset.task, State: r.dataset.state}; })`, &rows)
	want := []struct{ Name, State string }{
		{"nightly-backup", "exhausted"}, {xssName, "failed"}, {"cleanup", "missed"}, {"sync-users", "retrying"},
		{"long-etl", "running"}, {"billing-export", "done"}, {"hourly-report", "done"},
	}
	if fmt.Sprint(rows) != fmt.Sprint(want) {
		t.Errorf("the overview lists %v, want %v", rows, want)
	}
	if n := b.text(`String(document.images.length) + " " + document.querySelectorAll("script").length`); n != "0 0" {
		t.Errorf("the overview holds images and scripts: %s", n)
	}
	if got := b.text(`document.querySelector("a.badge[data-state=failed]").textContent`); got != "failed 1" {
		t.Errorf("the failed count reads %q", got)
	}
	if v := b.cspViolations(); len(v) > 0 {
		t.Errorf("the overview's policy blocked %v", v)
	}
	savePNG(t, "overview.png", b.screenshot(), 1000)

	// The filter is a form: type, submit, get the matching tasks.
	b.typeText(`input[name=q]`, "backup")
	b.eval(`document.querySelector("form.filter button[type=submit]").click()`, nil)
	b.await("the filtered overview", `location.search === "?q=backup&state=" && document.readyState === "complete"`)
	if got := b.text(`Array.from(document.querySelectorAll("tr.task")).map(function (r) { return r.dataset.task; }).join(",")`); got != "nightly-backup" {
		t.Errorf("the filter for backup shows %q", got)
	}

	// The task named with markup: its link leads to its page, which shows
	// the name and the error as text.
	b.navigate(srv.URL + "/")
	b.eval(`Array.from(document.querySelectorAll("tr.task a")).filter(function (a) { return a.textContent === `+jsString(xssName)+`; })[0].click()`, nil)
	b.await("the task's page", `document.querySelector("h1[data-task]") && document.readyState === "complete"`)
	if got := b.text(`document.querySelector("h1").textContent`); got != xssName {
		t.Errorf("the task's page is titled %q, want %q", got, xssName)
	}
	if got := b.text(`document.querySelector("tr.slot[data-phase=failed] td.err").textContent`); got != `<script>alert("pwned")</script> & <b>bold</b>` {
		t.Errorf("the failed slot's error reads %q", got)
	}
	if got := b.text(`document.querySelector("tr.attempt td.out pre").textContent`); got != xssOutput {
		t.Errorf("the attempt's output reads %q, want %q", got, xssOutput)
	}
	if n := b.text(`String(document.images.length) + " " + document.querySelectorAll("b, i, iframe, script:not(:last-of-type)").length`); n != "0 0" {
		t.Errorf("the task's page made elements of the name or the error: %s", n)
	}
	if v := b.cspViolations(); len(v) > 0 {
		t.Errorf("the task's page's policy blocked %v", v)
	}
	b.eval(`document.querySelectorAll("details").forEach(function (d) { d.open = true; })`, nil)
	savePNG(t, "task.png", b.screenshot(), 1000)
	b.navigate(srv.URL + "/tasks/nightly-backup")
	savePNG(t, "task-exhausted.png", b.screenshot(), 1000)

	// Behind a proxy that serves them under a path of their own, the
	// pages' links stay under it.
	prefixed := http.NewServeMux()
	prefixed.Handle("/ops/slotd/", http.StripPrefix("/ops/slotd", pageFleet(t, 0)))
	proxy := httptest.NewServer(prefixed)
	defer proxy.Close()
	b.navigate(proxy.URL + "/ops/slotd/")
	b.eval(`document.querySelector("tr.task a").click()`, nil)
	b.await("a task's page under the prefix", `location.pathname === "/ops/slotd/tasks/nightly-backup" && document.querySelector("h1[data-task]")`)
	b.eval(`document.querySelector("header a").click()`, nil)
	b.await("the overview again", `location.pathname === "/ops/slotd/" && document.querySelector("tr.task")`)

	big := httptest.NewServer(pageFleet(t, 10_000))
	defer big.Close()
	// The first load reads the fleet, renders and draws it.
	took := b.navigate(big.URL + "/?per=200")
	res, err := http.Get(big.URL + "/?per=200")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	t.Logf("the overview of 10,007 tasks, 200 a page: %d bytes, loaded in chromium in %v (the fleet read, rendered, drawn)", len(body), took.Round(time.Millisecond))
	if len(body) > 1<<20 || !strings.Contains(b.text(`document.querySelector("header .muted").textContent`), "10007 tasks") {
		t.Errorf("the overview of 10,007 tasks: %d bytes", len(body))
	}
	savePNG(t, "overview-10k.png", b.screenshot(), 1000)
}

// postRecord is one POST the task page's buttons made.
type postRecord struct {
	Method, Path, Name, Action, Authorization string
}

// The task page's buttons POST to /api/v1/tasks/{name}/trigger|pause|resume
// with the bearer token typed once and kept in the tab's sessionStorage
// across page loads, and show the answer as text; a refused token is
// forgotten. The POST routes are a recorder here (the daemon's own are
// tested where they are built).
func TestTaskButtonsInBrowser(t *testing.T) {
	bin := chromium(t)
	var mu sync.Mutex
	var posts []postRecord
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v1/tasks/{name}/{action}", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		posts = append(posts, postRecord{r.Method, r.URL.EscapedPath(), r.PathValue("name"), r.PathValue("action"), r.Header.Get("Authorization")})
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if r.PathValue("action") == "pause" {
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprintln(w, `{"error": "<b>wrong token</b>"}`)
			return
		}
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprintf(w, "{\"task\": %q, \"action\": %q}\n", r.PathValue("name"), r.PathValue("action"))
	})
	mux.Handle("/", pageFleet(t, 0))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	recorded := func() []postRecord {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(posts)
	}
	b := startBrowser(t, bin, 1280, 800)
	page := srv.URL + "/tasks/" + url.PathEscape(xssName)
	b.navigate(page)
	click := func(action string) {
		t.Helper()
		b.eval(`document.getElementById("result").textContent = ""; document.querySelector("button[data-action=`+action+`]").click()`, nil)
	}
	result := func() (string, string) {
		return b.text(`document.getElementById("result").textContent`), b.text(`document.getElementById("result").className`)
	}

	// Without a token: no request, a prompt for it.
	click("trigger")
	if text, _ := result(); !strings.Contains(text, "Enter the API token") || len(recorded()) != 0 {
		t.Fatalf("Run now without a token: %q, %d requests", text, len(recorded()))
	}
	b.typeText("#token", "s3cret-token")
	click("trigger")
	b.await("the trigger's answer", `document.getElementById("result").textContent.indexOf("202") >= 0`)
	if text, class := result(); !strings.Contains(text, "trigger: 202 Accepted") || !strings.Contains(text, `"action": "trigger"`) || class != "answer-ok" {
		t.Errorf("after Run now the page shows %q (%s)", text, class)
	}
	if got := b.text(`String(document.getElementById("token-label").hidden) + " " + document.getElementById("forget").hidden`); got != "true false" {
		t.Errorf("with a token kept, the token field's hidden and the forget button's: %s", got)
	}

	// A new load of the page in this tab keeps the token.
	b.navigate(page)
	click("resume")
	b.await("the resume's answer", `document.getElementById("result").textContent.indexOf("202") >= 0`)
	click("pause")
	b.await("the pause's answer", `document.getElementById("result").textContent.indexOf("401") >= 0`)
	text, class := result()
	if !strings.Contains(text, `pause: 401 Unauthorized`) || !strings.Contains(text, `<b>wrong token</b>`) || class != "answer-error" {
		t.Errorf("after a refused Pause the page shows %q (%s)", text, class)
	}
	if bg := b.text(`getComputedStyle(document.getElementById("result")).backgroundColor`); bg != "rgba(0, 0, 0, 0)" {
		t.Errorf("the answer is drawn on a background of its own (%s): the badge colours reach it", bg)
	}
	if n := b.text(`String(document.querySelectorAll("#result *").length) + " " + (sessionStorage.getItem("slotd-token") === null)`); n != "0 true" {
		t.Errorf("after a refused token: elements in the answer, token forgotten: %s", n)
	}
	if v := b.cspViolations(); len(v) > 0 {
		t.Errorf("the task page's policy blocked %v", v)
	}

	escaped := "/api/v1/tasks/" + strings.NewReplacer("<", "%3C", ">", "%3E", " ", "%20", "=", "%3D").Replace(xssName) + "/"
	want := []postRecord{
		{"POST", escaped + "trigger", xssName, "trigger", "Bearer s3cret-token"},
		{"POST", escaped + "resume", xssName, "resume", "Bearer s3cret-token"},
		{"POST", escaped + "pause", xssName, "pause", "Bearer s3cret-token"},
	}
	if got := recorded(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the buttons sent\n%+v\nwant\n%+v", got, want)
	}
	savePNG(t, "task-buttons.png", b.screenshot(), 1000)
}
