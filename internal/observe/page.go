package observe

import (
	_ "embed"
	"html/template"
	"io"
	"slices"
	"time"
)

// The status page: server-rendered HTML with inline CSS and no script, so
// that it works in any browser, behind any proxy, with nothing to build.
// html/template escapes everything that comes from the store or a task's
// output.
var (
	//go:embed page.html
	pageHTML string
	pageTmpl = template.Must(template.New("page").Funcs(template.FuncMap{
		"iso":     func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) },
		"clock":   func(t time.Time) string { return t.UTC().Format(time.DateTime) },
		"until":   func(now, t time.Time) time.Duration { return t.Sub(now).Round(time.Second) },
		"dur":     formatDuration,
		"reverse": reversed,
		"bad":     failing,
	}).Parse(pageHTML))
)

// Page is what the status page shows.
type Page struct {
	StatusReport
	Replica string // the replica serving the page; "" leaves it out
	Error   string // why the fleet's state could not be read, if it could not
}

// pageData is Page with what the template derives from it.
type pageData struct {
	Page
	Problems int      // tasks whose latest settled slot did not succeed
	Phases   []string // the legend
}

// WritePage renders the status page of p to w.
func WritePage(w io.Writer, p Page) error {
	d := pageData{Page: p, Phases: []string{
		PhaseDone, PhaseRunning, PhaseRetrying, PhasePending,
		PhaseFailed, PhaseExhausted, PhaseMissed, PhasePaused, PhaseUnscheduled, PhaseForeign, PhaseUnknown,
	}}
	for i := range p.Tasks {
		if failing(p.Tasks[i]) {
			d.Problems++
		}
	}
	return pageTmpl.Execute(w, d)
}

// failing reports whether t's latest settled slot did not succeed.
func failing(t TaskStatus) bool {
	for _, s := range t.Slots { // newest first
		switch s.Phase {
		case PhaseDone:
			return false
		case PhaseFailed, PhaseExhausted, PhaseMissed, PhaseForeign:
			return true
		}
	}
	return false
}

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
