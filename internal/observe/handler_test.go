package observe_test

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/slotd/slotd/internal/observe"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/memlock"
	"github.com/slotd/slotd/scheduler"
	"github.com/slotd/slotd/scheduler/history"
)

// served is a daemon's HTTP handler over a Memory store and history, as
// `slotd run` builds it on the embedded store, without running the
// scheduler.
type served struct {
	t     *testing.T
	tasks []scheduler.Task
	store lock.Store
	hist  *history.Memory
	h     http.Handler
}

func newServed(t *testing.T, store lock.Store) *served {
	t.Helper()
	var tasks []scheduler.Task
	for _, name := range []string{"report", "backup"} {
		// done_ttl no longer than the window: yesterday's slot, never
		// claimed here, reads pending until its window closes at 23:00
		// and unknown after, never missed (which would outrank today's
		// state in the last hour of every day).
		task := statusTask(t, name, "@every 24h", 3, 47*time.Hour)
		task.Deadline = 47 * time.Hour
		tasks = append(tasks, task)
	}
	hist := history.NewMemory(0)
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "slotd_build_info", Help: "Always 1."}, func() float64 { return 1 }))
	sched := scheduler.New(tasks, store, scheduler.WithReplica("r1"), scheduler.WithLogger(slog.New(slog.DiscardHandler)))
	h := observe.Handler(observe.Daemon{Scheduler: sched, Gatherer: reg, Store: store, History: hist, Replica: "r1", MaxClockSkew: time.Second})
	return &served{t: t, tasks: tasks, store: store, hist: hist, h: h}
}

// task returns the named task.
func (s *served) task(name string) *scheduler.Task {
	for i := range s.tasks {
		if s.tasks[i].Name == name {
			return &s.tasks[i]
		}
	}
	s.t.Fatalf("no task %s", name)
	return nil
}

func (s *served) get(path string) (*http.Response, string) {
	s.t.Helper()
	return s.getQuiet(path)
}

// getQuiet is get for any goroutine.
func (s *served) getQuiet(path string) (*http.Response, string) {
	rec := httptest.NewRecorder()
	s.h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	res := rec.Result()
	body, _ := io.ReadAll(res.Body)
	return res, string(body)
}

// seed completes report's latest slot and fails backup's latest slot once,
// with an error that holds markup; it returns both slots.
func (s *served) seed() (done, failed lock.Slot) {
	s.t.Helper()
	ctx := context.Background()
	now := time.Now()
	for i, name := range []string{"report", "backup"} {
		task := s.task(name)
		at, _ := task.Schedule.Latest(now)
		slot := task.Slot(at)
		c, err := s.store.Claim(ctx, slot, "r1", lock.Policy{Lease: time.Minute, DoneTTL: task.DoneTTL, MaxAttempts: task.MaxAttempts})
		if err != nil || c.Result != lock.Won {
			s.t.Fatalf("claim %s: %+v %v", slot, c, err)
		}
		owner := lock.Owner{ID: "r1", Attempt: c.Attempt}
		e := scheduler.HistoryEntry{Slot: slot.ID, SlotTime: slot.Time, Attempt: 1, Token: lock.Token(slot.Time, 1),
			Replica: "r1", Started: now, Duration: time.Second}
		if i == 0 {
			err, e.Outcome, done = s.store.Complete(ctx, slot, owner, task.DoneTTL), "success", slot
		} else {
			err, e.Outcome, e.Error, failed = s.store.Release(ctx, slot, owner), "failure", `<script>alert("pwned")</script> & more`, slot
		}
		if err != nil {
			s.t.Fatal(err)
		}
		if err := s.hist.Append(ctx, name, e); err != nil {
			s.t.Fatal(err)
		}
	}
	return done, failed
}

// /api/v1/tasks is the status JSON, computed live.
func TestTasksAPI(t *testing.T) {
	s := newServed(t, memlock.New(nil))
	done, failed := s.seed()
	res, body := s.get("/api/v1/tasks?n=2")
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("GET /api/v1/tasks: %s %s\n%s", res.Status, res.Header.Get("Content-Type"), body)
	}
	var rep observe.StatusReport
	if err := json.Unmarshal([]byte(body), &rep); err != nil {
		t.Fatalf("%v\n%s", err, body)
	}
	if len(rep.Tasks) != 2 || len(rep.Tasks[0].Slots) != 2 || rep.Now.IsZero() {
		t.Fatalf("GET /api/v1/tasks?n=2:\n%s", body)
	}
	if got := rep.Tasks[0].Slots[0]; got.ID != done.ID || got.Phase != "done" || got.Replica != "r1" || got.Last == nil || got.Last.Outcome != "success" {
		t.Errorf("report's latest slot: %+v", got)
	}
	if got := rep.Tasks[1].Slots[0]; got.ID != failed.ID || got.Phase != "retrying" || got.Last == nil || !strings.Contains(got.Last.Error, "<script>") {
		t.Errorf("backup's latest slot: %+v", got)
	}
	// Live within ViewTTL: a change in the store shows a second later.
	task := s.task("backup")
	if _, err := s.store.Claim(context.Background(), failed, "r2", lock.Policy{Lease: time.Minute, DoneTTL: task.DoneTTL, MaxAttempts: 3}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(observe.ViewTTL + 50*time.Millisecond)
	_, body = s.get("/api/v1/tasks")
	rep = observe.StatusReport{}
	if err := json.Unmarshal([]byte(body), &rep); err != nil {
		t.Fatal(err)
	}
	if got := rep.Tasks[1].Slots[0]; got.Phase != "running" || got.Replica != "r2" || len(rep.Tasks[1].Slots) != observe.DefaultSlots {
		t.Errorf("after a new claim: %+v (%d slots)", got, len(rep.Tasks[1].Slots))
	}
}

// / is the overview: the tasks counted by state, the failing one first,
// linking to its page, every value escaped, refreshing itself; a task's
// page shows its slots with their phases.
func TestStatusPage(t *testing.T) {
	s := newServed(t, memlock.New(nil))
	done, failed := s.seed()
	res, body := s.get("/")
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Fatalf("GET /: %s %s", res.Status, res.Header.Get("Content-Type"))
	}
	for _, want := range []string{
		`<meta http-equiv="refresh" content="5">`,
		`data-task="report" data-state="done"`, `data-task="backup" data-state="retrying"`,
		`<a href="tasks/report">report</a>`, `<a href="tasks/backup">backup</a>`,
		`data-state="done" data-count="1"`, `data-state="retrying" data-count="1"`, `data-state="failed" data-count="0"`,
		`&lt;script&gt;alert(&#34;pwned&#34;)&lt;/script&gt; &amp; more`,
		`served by <span class="mono">r1</span>`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("overview lacks %s", want)
		}
	}
	if strings.Index(body, `data-task="backup"`) > strings.Index(body, `data-task="report"`) {
		t.Errorf("the retrying task is not listed before the done one")
	}
	if strings.Contains(body, "<script") {
		t.Errorf("overview holds a <script> element: the task's error is not escaped")
	}
	for task, slot := range map[string]lock.Slot{"report": done, "backup": failed} {
		res, body := s.get("/tasks/" + task)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("GET /tasks/%s: %s", task, res.Status)
		}
		phase := map[string]string{"report": "done", "backup": "retrying"}[task]
		for _, want := range []string{
			`<h1 data-task="` + task + `">` + task + `</h1>`,
			`data-slot="` + slot.ID + `" data-phase="` + phase + `"`,
			`<button type="button" data-action="trigger">Run now</button>`,
		} {
			if !strings.Contains(body, want) {
				t.Errorf("GET /tasks/%s lacks %s", task, want)
			}
		}
		if task == "backup" && !strings.Contains(body, `&lt;script&gt;alert(&#34;pwned&#34;)&lt;/script&gt; &amp; more`) {
			t.Errorf("GET /tasks/backup does not show the error escaped")
		}
		if strings.Count(body, "<script") != 1 {
			t.Errorf("GET /tasks/%s holds %d <script> elements, want its own one", task, strings.Count(body, "<script"))
		}
	}
	if res, _ := s.get("/nosuchpage"); res.StatusCode != http.StatusNotFound {
		t.Errorf("GET /nosuchpage: %s, want 404", res.Status)
	}
}

// When the store does not answer, both say so with 503; the page escapes
// the error too.
func TestStatusStoreDown(t *testing.T) {
	s := newServed(t, downTime{memlock.New(nil)})
	res, body := s.get("/api/v1/tasks")
	var e struct{ Error string }
	if res.StatusCode != http.StatusServiceUnavailable || json.Unmarshal([]byte(body), &e) != nil || !strings.Contains(e.Error, "<down>") {
		t.Errorf("GET /api/v1/tasks with the store down: %s\n%s", res.Status, body)
	}
	for _, path := range []string{"/", "/tasks/report"} {
		res, body = s.get(path)
		if res.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "&lt;down&gt;") || strings.Contains(body, "<down>") {
			t.Errorf("GET %s with the store down: %s\n%s", path, res.Status, body)
		}
	}
	res, body = s.get("/api/v1/tasks/report")
	if res.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "down") {
		t.Errorf("GET /api/v1/tasks/report with the store down: %s\n%s", res.Status, body)
	}
}

type downTime struct{ lock.Store }

func (downTime) Time(context.Context) (time.Time, error) {
	return time.Time{}, errors.New("lock: time: dial tcp: <down>")
}

// /metrics serves the registry's series (here a build_info) and the
// engine's, the store's and clock's gauges and every task's, as one valid text-format scrape, and the same gzipped to a
// scraper that asks for it.
func TestMetricsEndpoint(t *testing.T) {
	s := newServed(t, memlock.New(time.Now))
	res, body := s.get("/metrics")
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Fatalf("GET /metrics: %s, Content-Type %q", res.Status, res.Header.Get("Content-Type"))
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("the scrape does not parse: %v", err)
	}
	for _, name := range []string{"slotd_build_info", "slotd_redis_up", "slotd_clock_skew_seconds", "slotd_claims_total", "slotd_task_duration_seconds"} {
		if mfs[name] == nil {
			t.Errorf("no %s in the scrape", name)
		}
	}
	tasks := map[string]bool{}
	for _, m := range mfs["slotd_running_tasks"].GetMetric() {
		tasks[m.GetLabel()[0].GetValue()] = true
	}
	if len(tasks) != len(s.tasks) || !tasks["report"] || !tasks["backup"] {
		t.Errorf("slotd_running_tasks for tasks %v, want every configured task", tasks)
	}

	for _, accept := range []string{"gzip", "deflate, gzip;q=0.5", "gzip;q=0"} {
		req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		req.Header.Set("Accept-Encoding", accept)
		rec := httptest.NewRecorder()
		s.h.ServeHTTP(rec, req)
		want := "gzip"
		if accept == "gzip;q=0" {
			want = ""
		}
		if got := rec.Header().Get("Content-Encoding"); got != want {
			t.Errorf("Accept-Encoding %q: Content-Encoding %q, want %q", accept, got, want)
			continue
		}
		var r io.Reader = rec.Body
		if want == "gzip" {
			zr, err := gzip.NewReader(rec.Body)
			if err != nil {
				t.Fatal(err)
			}
			r = zr
		}
		p := expfmt.NewTextParser(model.LegacyValidation)
		got, err := p.TextToMetricFamilies(r)
		if err != nil {
			t.Fatalf("Accept-Encoding %q: the scrape does not parse: %v", accept, err)
		}
		if len(got) != len(mfs) {
			t.Errorf("Accept-Encoding %q: %d families, want %d", accept, len(got), len(mfs))
		}
	}
}

// /healthz answers while the process serves; /readyz only once the store
// has answered a check (the scheduler here has not run one).
func TestHealthAndReadiness(t *testing.T) {
	s := newServed(t, memlock.New(nil))
	if res, body := s.get("/healthz"); res.StatusCode != http.StatusOK || body != "ok\n" {
		t.Errorf("GET /healthz: %s %q", res.Status, body)
	}
	if res, body := s.get("/readyz"); res.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "store unreachable") {
		t.Errorf("GET /readyz before any check: %s %q, want 503 store unreachable", res.Status, body)
	}
}

// Probe is healthy on a 2xx answer only, and tells a bad URL apart.
func TestProbe(t *testing.T) {
	s := newServed(t, memlock.New(nil))
	srv := httptest.NewServer(s.h)
	defer srv.Close()
	ctx := context.Background()
	if status, err := observe.Probe(ctx, srv.URL+"/healthz"); err != nil || status != "200 OK" {
		t.Errorf("Probe /healthz: %q, %v; want 200 OK", status, err)
	}
	if _, err := observe.Probe(ctx, srv.URL+"/readyz"); err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("Probe /readyz before any store check: %v, want a 503", err)
	}
	if _, err := observe.Probe(ctx, "::nope"); !errors.Is(err, observe.ErrBadURL) {
		t.Errorf("Probe of a bad URL: %v, want ErrBadURL", err)
	}
}
