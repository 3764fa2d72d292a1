package observe_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/observe"
	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/memlock"
	"github.com/slotd/slotd/lock/redislock"
	"github.com/slotd/slotd/scheduler"
	"github.com/slotd/slotd/scheduler/history"
	"github.com/slotd/slotd/scheduler/schedule"
)

// GET /api/v1/tasks/{name} is a task's detail: its slots (?n=), state,
// policy and next fire times with their slot ids; /history pages its
// attempts with a cursor; an unknown task is a 404 naming it, a bad
// cursor a 400.
func TestTaskAPI(t *testing.T) {
	s := newServed(t, memlock.New(nil))
	_, failed := s.seed()
	ctx := context.Background()
	for k := 2; k <= 5; k++ { // four more attempts of backup, recorded
		e := scheduler.HistoryEntry{Slot: failed.ID, SlotTime: failed.Time, Attempt: k, Replica: "r2", Outcome: "failure",
			Started: time.Now(), Error: fmt.Sprintf("attempt %d", k)}
		if err := s.hist.Append(ctx, "backup", e); err != nil {
			t.Fatal(err)
		}
	}

	res, body := s.get("/api/v1/tasks/backup?n=3")
	var d observe.TaskDetail
	if res.StatusCode != http.StatusOK || json.Unmarshal([]byte(body), &d) != nil {
		t.Fatalf("GET /api/v1/tasks/backup: %s\n%s", res.Status, body)
	}
	if d.Task.Name != "backup" || len(d.Task.Slots) != 3 || d.Task.Slots[0].ID != failed.ID || d.State != observe.PhaseRetrying ||
		len(d.Upcoming) != observe.UpcomingFires || d.Lease != "3s" || d.Window != "47h0m0s" {
		t.Errorf("GET /api/v1/tasks/backup?n=3:\n%s", body)
	}
	task := s.task("backup")
	at := d.Now
	for _, f := range d.Upcoming {
		next := task.Schedule.Next(at)
		if !f.Time.Equal(next) || f.Slot != task.Schedule.SlotID(next) {
			t.Errorf("upcoming %+v, want %v %s", f, next, task.Schedule.SlotID(next))
		}
		at = next
	}

	// A task in a time zone fires at its wall-clock time there.
	paris := statusTask(t, "paris", "0 9 * * *", 3, 48*time.Hour)
	paris.Timezone = "Europe/Paris"
	var err error
	if paris.Schedule, err = schedule.Parse("0 9 * * *", "Europe/Paris"); err != nil {
		t.Fatal(err)
	}
	pd, err := observe.Detail(ctx, &paris, s.store, nil, 1)
	if err != nil || len(pd.Upcoming) != observe.UpcomingFires {
		t.Fatalf("Detail of paris: %+v, %v", pd, err)
	}
	for _, f := range pd.Upcoming {
		if f.Local.Hour() != 9 || f.Local.Location().String() != "Europe/Paris" || !f.Local.Equal(f.Time) || f.Time.Location() != time.UTC {
			t.Errorf("paris fires at %v (%v), want 09:00 Europe/Paris", f.Local, f.Time)
		}
	}

	var page strings.Builder
	if err := observe.WriteTaskPage(&page, observe.TaskPage{TaskDetail: pd}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(page.String(), "<th>in Europe/Paris</th>") || !regexp.MustCompile(`<td>\d{4}-\d\d-\d\d 09:00:00 CES?T</td>`).MatchString(page.String()) {
		t.Errorf("paris's page does not show its fire times in its zone")
	}

	// Pages of two, newest first, until the cursor runs out.
	var seen []int
	path := "/api/v1/tasks/backup/history?limit=2"
	for range 5 {
		res, body := s.get(path)
		var a observe.Attempts
		if res.StatusCode != http.StatusOK || json.Unmarshal([]byte(body), &a) != nil || a.Task != "backup" || len(a.Entries) > 2 {
			t.Fatalf("GET %s: %s\n%s", path, res.Status, body)
		}
		for _, e := range a.Entries {
			seen = append(seen, e.Attempt)
		}
		if a.Next == "" {
			break
		}
		path = "/api/v1/tasks/backup/history?limit=2&before=" + url.QueryEscape(a.Next)
	}
	if fmt.Sprint(seen) != "[5 4 3 2 1]" {
		t.Errorf("the pages held attempts %v, want [5 4 3 2 1]", seen)
	}

	for path, want := range map[string]int{
		"/api/v1/tasks/nosuch":                      http.StatusNotFound,
		"/api/v1/tasks/nosuch/history":              http.StatusNotFound,
		"/api/v1/tasks/backup/history?before=x":     http.StatusBadRequest,
		"/api/v1/tasks/backup/history?before=1-2-3": http.StatusBadRequest,
	} {
		res, body := s.get(path)
		var e struct{ Error string }
		if res.StatusCode != want || json.Unmarshal([]byte(body), &e) != nil || e.Error == "" {
			t.Errorf("GET %s: %s, want %d with an error\n%s", path, res.Status, want, body)
		}
		if want == http.StatusNotFound && !strings.Contains(e.Error, `"nosuch"`) {
			t.Errorf("GET %s: the error does not name the task: %q", path, e.Error)
		}
	}
	res, body = s.get("/tasks/" + url.PathEscape("<b>nosuch</b>"))
	if res.StatusCode != http.StatusNotFound || !strings.Contains(body, "No task named <span class=\"mono\">&lt;b&gt;nosuch&lt;/b&gt;</span>") {
		t.Errorf("GET /tasks/<b>nosuch</b>: %s\n%s", res.Status, body)
	}
}

// ReadAttempts pages every history newest first: the memory one, the
// Redis one (which reads only the page) and Redlock's several streams.
func TestReadAttemptsPages(t *testing.T) {
	ctx := context.Background()
	srv, a, b := redistest.Start(t), redistest.Start(t), redistest.Start(t)
	redisHist := redislock.NewHistory(srv.Client(), "slotd", time.Hour)
	if _, ok := any(redisHist).(observe.HistoryPager); !ok {
		t.Errorf("the Redis history does not read a page by itself (observe.HistoryPager)")
	}
	for name, h := range map[string]scheduler.History{
		"memory": history.NewMemory(0),
		"redis":  redisHist,
		"multi": redislock.NewMultiHistory(redislock.NewHistory(a.Client(), "slotd", time.Hour),
			redislock.NewHistory(b.Client(), "slotd", time.Hour)),
	} {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			for k := 1; k <= 45; k++ {
				e := scheduler.HistoryEntry{Slot: fmt.Sprintf("s%02d", k), Attempt: 1, Outcome: "success", Started: start.Add(time.Duration(k) * time.Millisecond)}
				if err := h.Append(ctx, "job", e); err != nil {
					t.Fatal(err)
				}
			}
			var got []string
			var sizes []int
			before := ""
			for range 10 {
				p, err := observe.ReadAttempts(ctx, h, "job", before, 20)
				if err != nil {
					t.Fatal(err)
				}
				sizes = append(sizes, len(p.Entries))
				for _, e := range p.Entries {
					got = append(got, e.Slot)
				}
				if before = p.Next; before == "" {
					break
				}
			}
			var want []string
			for k := 45; k >= 1; k-- {
				want = append(want, fmt.Sprintf("s%02d", k))
			}
			if fmt.Sprint(sizes) != "[20 20 5]" || strings.Join(got, ",") != strings.Join(want, ",") {
				t.Errorf("pages of %v: %v", sizes, got)
			}
			if _, err := observe.ReadAttempts(ctx, h, "job", "nonsense", 20); err == nil {
				t.Errorf("a cursor that is not an id was accepted")
			}
		})
	}
	// Past the oldest entry, and before the first possible id.
	es, err := redisHist.RecentBefore(ctx, "job", "0-0", 5)
	if err != nil || len(es) != 0 {
		t.Errorf("RecentBefore 0-0: %v, %v", es, err)
	}
	es, err = redisHist.RecentBefore(ctx, "job", "1-0", 5)
	if err != nil || len(es) != 0 {
		t.Errorf("RecentBefore 1-0: %v, %v", es, err)
	}
}

// The overview filters by a part of the name (any case) and by state
// ("failing" for all four problems), and pages what matches; its links
// carry the filter and work without script.
func TestOverviewFilterAndPages(t *testing.T) {
	var ts []observe.TaskStatus
	phases := []string{observe.PhaseDone, observe.PhaseExhausted, observe.PhaseRunning, observe.PhaseMissed, observe.PhasePending}
	for i := range 25 {
		ph := phases[i%len(phases)]
		ts = append(ts, observe.TaskStatus{Name: fmt.Sprintf("Job-%02d", i), Schedule: "@every 1m", Timezone: "UTC",
			Slots: []observe.SlotStatus{{ID: "1", Phase: ph}}})
	}
	now := time.Now()
	for _, tc := range []struct {
		f             observe.Filter
		first         string
		n, matched, p int
	}{
		{observe.Filter{}, "Job-01", 25, 25, 1},
		{observe.Filter{State: observe.StateFailing}, "Job-01", 10, 10, 1},
		{observe.Filter{State: observe.PhaseRunning}, "Job-02", 5, 5, 1},
		{observe.Filter{Name: "job-1"}, "Job-11", 10, 10, 1},
		{observe.Filter{Page: 2, Per: 10}, "Job-02", 10, 25, 3}, // after 5 exhausted, 5 missed: the running ones
		{observe.Filter{Page: 3, Per: 10}, "Job-14", 5, 25, 3},
		{observe.Filter{Page: 9, Per: 10}, "", 0, 25, 3},
	} {
		o := observe.NewOverview(now, ts, tc.f)
		first := ""
		if len(o.Tasks) > 0 {
			first = o.Tasks[0].Name
		}
		if first != tc.first || len(o.Tasks) != tc.n || o.Matched != tc.matched || o.Pages != tc.p || o.Total != 25 {
			t.Errorf("%+v: first %q, %d tasks, %d matched, %d pages; want %q, %d, %d, %d", tc.f, first, len(o.Tasks), o.Matched, o.Pages, tc.first, tc.n, tc.matched, tc.p)
		}
	}
	if o := observe.NewOverview(now, ts, observe.Filter{}); o.Counts[observe.PhaseExhausted] != 5 || o.Failing() != 10 {
		t.Errorf("counts %v, failing %d", o.Counts, o.Failing())
	}

	// Over HTTP: the query parameters select, the links keep them.
	tasks := make([]scheduler.Task, 0, 25)
	for i := range 25 {
		tasks = append(tasks, statusTask(t, fmt.Sprintf("job-%02d", i), "@every 1h", 3, 48*time.Hour))
	}
	st := memlock.New(nil)
	sched := scheduler.New(tasks, st, scheduler.WithLogger(slog.New(slog.DiscardHandler)))
	h := observe.Handler(observe.Daemon{Scheduler: sched, Store: st})
	get := func(path string) string {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("GET %s: %d", path, rec.Code)
		}
		return rec.Body.String()
	}
	body := get("/?q=job-1&per=4&page=2")
	for _, want := range []string{
		`data-task="job-14"`, `data-task="job-17"`, "page 2 of 3",
		`href="?per=4&amp;q=job-1"`, `href="?page=3&amp;per=4&amp;q=job-1"`, // the pager
		`href="?per=4&amp;q=job-1&amp;state=pending"`, // a state keeps the name, restarts at page 1
		`name="q" value="job-1"`, `<input type="hidden" name="per" value="4">`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("GET /?q=job-1&per=4&page=2 lacks %s", want)
		}
	}
	if strings.Contains(body, `data-task="job-13"`) || strings.Contains(body, `data-task="job-18"`) {
		t.Errorf("GET /?q=job-1&per=4&page=2 holds tasks of other pages")
	}
	if body := get("/?state=bogus&per=100000"); strings.Count(body, `<tr class="task`) != 25 {
		t.Errorf("an unknown state does not show every task")
	}
}

// A task named with markup, failing with markup in its error, shows as
// text on the overview and on its page, and its link is its escaped
// path.
func TestPagesEscapeTaskNames(t *testing.T) {
	const name = `<img src=x onerror=alert(1)>`
	task := statusTask(t, name, "@every 24h", 3, 47*time.Hour) // see newServed: no missed slot 23:00-24:00
	task.Deadline = 47 * time.Hour
	st, hist := memlock.New(nil), history.NewMemory(0)
	ctx := context.Background()
	at, _ := task.Schedule.Latest(time.Now())
	slot := task.Slot(at)
	c, err := st.Claim(ctx, slot, "r1", task.Policy)
	if err != nil || c.Result != lock.Won {
		t.Fatal(c, err)
	}
	if err := st.Release(ctx, slot, lock.Owner{ID: "r1", Attempt: c.Attempt}); err != nil {
		t.Fatal(err)
	}
	if err := hist.Append(ctx, name, scheduler.HistoryEntry{Slot: slot.ID, Attempt: 1, Outcome: "failure", Started: time.Now(), Error: `<svg onload=alert(2)>`}); err != nil {
		t.Fatal(err)
	}
	sched := scheduler.New([]scheduler.Task{task}, st, scheduler.WithLogger(slog.New(slog.DiscardHandler)))
	h := observe.Handler(observe.Daemon{Scheduler: sched, Store: st, History: hist})
	for _, path := range []string{"/", "/tasks/" + url.PathEscape(name)} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		body := rec.Body.String()
		if rec.Code != http.StatusOK || strings.Contains(body, "<img") || strings.Contains(body, "<svg") ||
			!strings.Contains(body, "&lt;img src=x onerror=alert(1)&gt;") || !strings.Contains(body, "&lt;svg onload=alert(2)&gt;") {
			t.Errorf("GET %s: %d\n%s", path, rec.Code, body)
		}
		if path == "/" && !strings.Contains(body, `href="tasks/%3Cimg%20src=x%20onerror=alert%281%29%3E"`) {
			t.Errorf("the overview's link to the task is not its escaped path:\n%s", body)
		}
	}
}

// A slot's latest attempt is its highest attempt number, even when the
// replica that made it has a clock behind the one before.
func TestLatestAttemptByNumber(t *testing.T) {
	task := statusTask(t, "job", "@every 1h", 3, 48*time.Hour)
	task.Deadline = 47 * time.Hour
	st, hist := memlock.New(nil), history.NewMemory(0)
	ctx := context.Background()
	now := time.Now()
	at, _ := task.Schedule.Latest(now)
	slot := task.Slot(at)
	for k, skew := range []time.Duration{0, -time.Minute} { // attempt 2 by a replica a minute behind
		c, err := st.Claim(ctx, slot, "r1", task.Policy)
		if err != nil || c.Result != lock.Won {
			t.Fatal(c, err)
		}
		if err := st.Release(ctx, slot, lock.Owner{ID: "r1", Attempt: c.Attempt}); err != nil {
			t.Fatal(err)
		}
		e := scheduler.HistoryEntry{Slot: slot.ID, Attempt: k + 1, Outcome: "failure", Started: now.Add(skew), Error: fmt.Sprintf("attempt %d", k+1)}
		if err := hist.Append(ctx, "job", e); err != nil {
			t.Fatal(err)
		}
	}
	ts, err := observe.Status(ctx, []scheduler.Task{task}, st, hist, now, 1)
	if err != nil {
		t.Fatal(err)
	}
	if last := ts[0].Slots[0].Last; last == nil || last.Attempt != 2 {
		t.Errorf("the slot's latest attempt: %+v, want attempt 2", last)
	}
}

// A page of attempts whose outputs are large ends once it holds about
// observe.MaxPageBytes, on the memory history and on Redis (which stops
// reading there), and its cursor goes on: every entry is read once, in
// order, in pages of at most that size.
func TestReadAttemptsPageBytesBounded(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	for name, h := range map[string]scheduler.History{
		"memory": history.NewMemory(0),
		"redis":  redislock.NewHistory(srv.Client(), "slotd", time.Hour),
	} {
		t.Run(name, func(t *testing.T) {
			const entries = 60
			output := strings.Repeat("o", history.MaxOutput)
			for k := 1; k <= entries; k++ {
				e := scheduler.HistoryEntry{Slot: fmt.Sprintf("s%02d", k), Attempt: 1, Outcome: "failure", Output: output}
				if err := h.Append(ctx, "job", e); err != nil {
					t.Fatal(err)
				}
			}
			var got []string
			before := ""
			for pages := 0; ; pages++ {
				p, err := observe.ReadAttempts(ctx, h, "job", before, observe.MaxAttempts)
				if err != nil || pages > entries {
					t.Fatalf("page %d: %v", pages, err)
				}
				size := 0
				for _, e := range p.Entries {
					got = append(got, e.Slot)
					size += len(e.Output)
				}
				if size > observe.MaxPageBytes+history.MaxOutput || len(p.Entries) == 0 {
					t.Errorf("page %d holds %d entries, %d bytes of output; want at most about %d", pages, len(p.Entries), size, observe.MaxPageBytes)
				}
				if before = p.Next; before == "" {
					break
				}
			}
			var want []string
			for k := entries; k >= 1; k-- {
				want = append(want, fmt.Sprintf("s%02d", k))
			}
			if strings.Join(got, ",") != strings.Join(want, ",") {
				t.Errorf("the pages read %v, want every entry once, newest first", got)
			}
		})
	}
}

// The task page shows the concurrency policy and, under queue, the slot
// waiting on the serving replica for the running one, in its row too.
func TestTaskPageShowsQueueWaiter(t *testing.T) {
	var b strings.Builder
	p := observe.TaskPage{Waiting: "20260101120001"}
	p.Task.Name = "tick"
	p.Concurrency = "queue"
	p.Task.Slots = []observe.SlotStatus{
		{ID: "20260101120001", Phase: observe.PhaseRunning},
		{ID: "20260101120000", Phase: observe.PhaseRunning},
	}
	if err := observe.WriteTaskPage(&b, p); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, want := range []string{
		"<dt>concurrency</dt><dd>queue · slot <span class=\"mono\">20260101120001</span> waits on this replica",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q:\n%s", want, page)
		}
	}
	if n := strings.Count(page, ">waiting</span>"); n != 1 {
		t.Errorf("%d slot rows marked waiting, want 1 (slot 20260101120001's)", n)
	}
	i := strings.Index(page, `data-slot="20260101120001"`)
	j := strings.Index(page, ">waiting</span>")
	k := strings.Index(page, `data-slot="20260101120000"`)
	if i < 0 || j < i || k < j {
		t.Errorf("the waiting mark is not in slot 20260101120001's row")
	}
}
