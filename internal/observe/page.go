package observe

import (
	_ "embed"
	"html/template"
	"io"
	"net/url"
	"slices"
	"strconv"
	"time"
)

// The pages: server-rendered HTML with one embedded style sheet, so that
// they work in any browser, behind any proxy, with nothing to build. The
// overview (/) has no script: its filter is a GET form and its pager
// links. A task's page (/tasks/{name}) has one script, for its action
// buttons. html/template escapes everything that comes from the store, the
// configuration or a task's output.
var (
	//go:embed page.css
	pageCSS string
	//go:embed task.js
	taskJS string
	//go:embed page.html
	pageHTML string
	//go:embed task.html
	taskHTML string

	pageFuncs = template.FuncMap{
		"iso":      func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) },
		"clock":    func(t time.Time) string { return t.UTC().Format(time.DateTime) },
		"local":    func(t time.Time) string { return t.Format(time.DateTime + " MST") },
		"until":    func(now, t time.Time) time.Duration { return t.Sub(now).Round(time.Second) },
		"dur":      formatDuration,
		"reverse":  reversed,
		"taskHref": taskHref,
		"help":     func(phase string) string { return phaseHelp[phase] },
		// The style sheet and the script go in verbatim, so that their
		// hashes in the Content-Security-Policy match what is served.
		"css":    func() template.CSS { return template.CSS(pageCSS) },
		"script": func() template.JS { return template.JS(taskJS) },
	}
	pageTmpl = template.Must(template.New("page").Funcs(pageFuncs).Parse(pageHTML))
	taskTmpl = template.Must(template.New("task").Funcs(pageFuncs).Parse(taskHTML))
)

// phases lists every slot phase, in the legend's order.
var phases = []string{
	PhaseDone, PhaseRunning, PhaseRetrying, PhasePending,
	PhaseFailed, PhaseExhausted, PhaseMissed, PhasePaused, PhaseUnscheduled, PhaseForeign, PhaseUnknown,
}

// phaseHelp says what each phase means, as the legends' tooltips.
var phaseHelp = map[string]string{
	PhaseDone:        "succeeded",
	PhaseRunning:     "an attempt holds the slot",
	PhaseRetrying:    "attempts failed; the window is open and attempts remain",
	PhasePending:     "the window is open and nothing has claimed the slot yet",
	PhaseFailed:      "the window closed after failed attempts, below the cap",
	PhaseExhausted:   "every allowed attempt failed",
	PhaseMissed:      "the window closed and nothing ever claimed the slot, or it waited for the task's running slot (concurrency = queue) until then",
	PhasePaused:      "the window closed with nothing claimed while the task is paused: skipped, not missed",
	PhaseUnscheduled: "fired before the fleet's first start: no replica was there to run it",
	PhaseForeign:     "the slot key holds a value slotd did not write",
	PhaseUnknown:     "the slot's keys and history have expired",
}

// Page is what the overview shows.
type Page struct {
	Overview
	Replica string // the replica serving the page; "" leaves it out
	Error   string // why the fleet's state could not be read, if it could not
}

// pageData is Page with what the template derives from it.
type pageData struct {
	Page
	Failing    int         // tasks in a problem state
	States     []stateLink // the legend: every state, its count and its filter
	All        string      // the link that clears the state filter
	FailingURL string      // the link to the failing tasks
	Prev, Next string      // the pager's links; "" at either end
	Per        int         // tasks per page if not DefaultPerPage, else 0
}

// stateLink is one state in the overview's legend.
type stateLink struct {
	State    string
	Count    int
	Href     string
	Selected bool
}

// WritePage renders the overview p to w.
func WritePage(w io.Writer, p Page) error {
	f := p.Filter
	d := pageData{Page: p, Failing: p.Failing()}
	for _, s := range phases {
		d.States = append(d.States, stateLink{State: s, Count: p.Counts[s], Href: f.with("state", s), Selected: f.State == s})
	}
	if f.Per != DefaultPerPage {
		d.Per = f.Per
	}
	d.All = f.with("state", "")
	d.FailingURL = f.with("state", StateFailing)
	if f.Page > 1 {
		d.Prev = f.with("page", strconv.Itoa(f.Page-1))
	}
	if f.Page < p.Pages {
		d.Next = f.with("page", strconv.Itoa(f.Page+1))
	}
	return pageTmpl.Execute(w, d)
}

// with is the overview's URL for f with key set to value, on the first
// page unless key is the page. Like every link of the pages it is
// relative, so that the pages work behind a proxy that serves them under
// a path of its own.
func (f Filter) with(key, value string) string {
	q := url.Values{}
	set := func(k, v string) {
		if v != "" {
			q.Set(k, v)
		}
	}
	set("q", f.Name)
	set("state", f.State)
	if f.Per != DefaultPerPage {
		set("per", strconv.Itoa(f.Per))
	}
	q.Del(key)
	if key != "page" || value != "1" {
		set(key, value)
	}
	if len(q) == 0 {
		return "./"
	}
	return "?" + q.Encode()
}

// filterOf reads the overview's query parameters: q, state (a phase or
// "failing"; anything else is ignored), page and per.
func filterOf(q url.Values) Filter {
	f := Filter{Name: q.Get("q"), State: q.Get("state")}
	if f.State != StateFailing && !slices.Contains(phases, f.State) {
		f.State = ""
	}
	f.Page, _ = strconv.Atoi(q.Get("page"))
	f.Per, _ = strconv.Atoi(q.Get("per"))
	if f.Per < 1 {
		f.Per = DefaultPerPage
	}
	f.Per = min(f.Per, MaxPerPage)
	f.Page = max(f.Page, 1)
	return f
}

// TaskPage is what a task's page shows.
type TaskPage struct {
	TaskDetail
	Attempts Attempts
	Replica  string // the replica serving the page; "" leaves it out
	Error    string // why the task's state could not be read, if it could not
	// NotFound is the name asked for when no task has it.
	NotFound string
	// Backfilling: slots of backfills under way on the serving replica
	// not yet ended (scheduler.Backfill); 0 leaves it out.
	Backfilling int64
	// Waiting is the slot waiting on the serving replica for the task's
	// running one (concurrency = "queue"); "" if none.
	Waiting string
}

// WriteTaskPage renders the page of one task to w.
func WriteTaskPage(w io.Writer, p TaskPage) error {
	return taskTmpl.Execute(w, struct {
		TaskPage
		Phases []string
		Older  string // the link to the next page of attempts; "" if none
	}{p, phases, olderHref(p)})
}

// olderHref links to the attempts older than p's.
func olderHref(p TaskPage) string {
	if p.Attempts.Next == "" {
		return ""
	}
	return "?" + url.Values{"before": {p.Attempts.Next}}.Encode() + "#attempts"
}

// taskHref is the path of the page of the task named name, relative to
// the overview's.
func taskHref(name string) string { return "tasks/" + url.PathEscape(name) }

func reversed(s []SlotStatus) []SlotStatus {
	out := slices.Clone(s)
	slices.Reverse(out)
	return out
}

// formatDuration is a duration to the millisecond below a second, and to
// the hundredth of a second above.
func formatDuration(d time.Duration) string {
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(10 * time.Millisecond).String()
}
