package observe

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/scheduler"
)

// Bounds of the overview, the first screen of the page.
const (
	// OverviewSlots is how many of each task's latest slots the overview
	// reads: enough to tell the open slot from the latest settled one, and
	// to draw a short strip. Each costs the store three reads per task.
	OverviewSlots = 3
	// DefaultPerPage is how many tasks a page of the overview lists unless
	// asked (?per=).
	DefaultPerPage = 50
	// MaxPerPage bounds ?per=, and with it the page's size.
	MaxPerPage = 200
	// maxOverviewError bounds, in bytes, the error an overview row shows;
	// the task's page shows it whole.
	maxOverviewError = 200
)

// StateFailing selects, in a filter, every task whose state is a problem:
// failed, exhausted, missed or foreign.
const StateFailing = "failing"

// fleetSummary is every task's status over its OverviewSlots latest slots,
// problems first, with the tasks counted by state: what the overview's
// pages are cut from.
type fleetSummary struct {
	Now    time.Time
	Tasks  []TaskSummary  // problems first (see stateRank), then by name
	Counts map[string]int // tasks by State
}

// TaskSummary is one task's row in the overview.
type TaskSummary struct {
	TaskStatus
	// State is what the task's latest slots say of it, one of the Phase
	// constants (see taskState).
	State string
	// Error is the latest attempt's error of the slot that makes the task
	// failing or retrying, cut to a line's length; "" if none.
	Error string
}

// Failing reports whether s's state is a problem.
func (s TaskSummary) Failing() bool { return problem(s.State) }

// problem reports whether a task in state needs an operator: its latest
// settled slot did not succeed.
func problem(state string) bool {
	switch state {
	case PhaseFailed, PhaseExhausted, PhaseMissed, PhaseForeign:
		return true
	}
	return false
}

// taskState is what a task's slots (newest first) say of it: the phase of
// its latest settled slot if that one did not succeed — a failure stays
// the task's state until a slot succeeds, whatever runs meanwhile — else
// the phase of its newest slot that is running, retrying or done, else
// that of its newest slot (pending, unscheduled or unknown); a task none
// of whose slots has fired yet is pending. A task paused fleet-wide is
// paused unless it is failing or running.
func taskState(t TaskStatus) string {
	state := slotsState(t.Slots)
	if t.Paused && !problem(state) && state != PhaseRunning {
		return PhasePaused // an operator's pause outranks the slots' quiet states
	}
	return state
}

// slotsState is taskState's reading of the slots alone.
func slotsState(slots []SlotStatus) string {
settled:
	for _, s := range slots {
		switch {
		case s.Phase == PhaseDone:
			break settled
		case problem(s.Phase):
			return s.Phase
		}
	}
	for _, s := range slots {
		switch s.Phase {
		case PhaseRunning, PhaseRetrying, PhaseDone:
			return s.Phase
		}
	}
	if len(slots) == 0 {
		return PhasePending
	}
	return slots[0].Phase
}

// stateRank orders the overview: exhausted, failed, missed and foreign
// tasks first, then retrying, then running, then the rest.
func stateRank(state string) int {
	switch state {
	case PhaseExhausted:
		return 0
	case PhaseFailed:
		return 1
	case PhaseMissed:
		return 2
	case PhaseForeign:
		return 3
	case PhaseRetrying:
		return 4
	case PhaseRunning:
		return 5
	}
	return 6
}

// summarize reads every task's latest OverviewSlots slots at the store's
// time: one call of store.States for all of them, and the history only of
// the tasks whose slots do not say everything by themselves (see
// slotsRead.settled) — a fleet whose slots all succeed costs no history
// read at all.
func summarize(ctx context.Context, tasks []scheduler.Task, store lock.Store, hist scheduler.History) (fleetSummary, error) {
	now, err := store.Time(ctx)
	if err != nil {
		return fleetSummary{}, err
	}
	r, err := readSlots(ctx, tasks, store, now, OverviewSlots)
	if err != nil {
		return fleetSummary{}, err
	}
	want := make([]bool, len(tasks))
	for i := range tasks {
		want[i] = !r.settled(i)
	}
	lasts, herrs, err := latestAttempts(ctx, tasks, want, hist, OverviewSlots)
	if err != nil {
		return fleetSummary{}, err
	}
	return summary(now, r.statuses(lasts, herrs)), nil
}

// summary counts and orders the statuses of a fleet at now.
func summary(now time.Time, ts []TaskStatus) fleetSummary {
	sum := fleetSummary{Now: now, Counts: map[string]int{}, Tasks: make([]TaskSummary, 0, len(ts))}
	for _, t := range ts {
		s := TaskSummary{TaskStatus: t, State: taskState(t)}
		if problem(s.State) || s.State == PhaseRetrying {
			s.Error = summaryError(t.Slots, s.State)
		}
		if s.Error == "" && t.ReadError != "" {
			s.Error = cutLine(t.ReadError)
		}
		sum.Counts[s.State]++
		sum.Tasks = append(sum.Tasks, s)
	}
	slices.SortStableFunc(sum.Tasks, func(a, b TaskSummary) int {
		return cmp.Or(cmp.Compare(stateRank(a.State), stateRank(b.State)), strings.Compare(a.Name, b.Name))
	})
	return sum
}

// NewOverview is the page f asks for of the overview of tasks' statuses
// at now (as Status returns them; the overview reads OverviewSlots slots
// of each).
func NewOverview(now time.Time, tasks []TaskStatus, f Filter) Overview {
	sum := summary(now, tasks)
	return sum.page(f)
}

// summaryError is the error of the latest attempt of the newest slot in
// state, cut to maxOverviewError bytes.
func summaryError(slots []SlotStatus, state string) string {
	for _, s := range slots {
		if s.Phase != state {
			continue
		}
		if s.Last == nil {
			return ""
		}
		return cutLine(s.Last.Error)
	}
	return ""
}

// cutLine cuts e to maxOverviewError bytes, marking a cut with "…".
func cutLine(e string) string {
	if len(e) > maxOverviewError {
		cut := maxOverviewError
		for cut > 0 && !utf8.RuneStart(e[cut]) {
			cut--
		}
		e = e[:cut] + "…"
	}
	return e
}

// Filter selects and pages the overview's tasks; its zero value is the
// first page of every task.
type Filter struct {
	Name  string // a part of the task's name, any case; "" matches all
	State string // a Phase constant or StateFailing; "" matches all
	Page  int    // 1-based; < 1 is 1
	Per   int    // tasks per page; < 1 is DefaultPerPage, at most MaxPerPage
}

// match reports whether s passes f's name and state.
func (f Filter) match(s *TaskSummary, lowerName string) bool {
	switch {
	case f.State == StateFailing && !s.Failing():
		return false
	case f.State != "" && f.State != StateFailing && s.State != f.State:
		return false
	}
	return lowerName == "" || strings.Contains(strings.ToLower(s.Name), lowerName)
}

// Overview is one page of the overview: the fleet counted by state, and
// the tasks of this page among those that pass the filter.
type Overview struct {
	Now    time.Time      `json:"now"`
	Total  int            `json:"total"`  // tasks configured
	Counts map[string]int `json:"counts"` // tasks by state
	Filter Filter         `json:"-"`
	// Matched is how many tasks pass the filter; Pages how many pages they
	// fill (at least 1).
	Matched int           `json:"matched"`
	Pages   int           `json:"pages"`
	Tasks   []TaskSummary `json:"tasks"`
}

// Failing is how many tasks are in a problem state.
func (o Overview) Failing() int {
	n := 0
	for state, c := range o.Counts {
		if problem(state) {
			n += c
		}
	}
	return n
}

// page cuts the page f asks for out of sum.
func (sum *fleetSummary) page(f Filter) Overview {
	if f.Per < 1 {
		f.Per = DefaultPerPage
	}
	f.Per = min(f.Per, MaxPerPage)
	f.Page = max(f.Page, 1)
	o := Overview{Now: sum.Now, Total: len(sum.Tasks), Counts: sum.Counts, Filter: f}
	lower := strings.ToLower(f.Name)
	from := (f.Page - 1) * f.Per
	for i := range sum.Tasks {
		s := &sum.Tasks[i]
		if !f.match(s, lower) {
			continue
		}
		if o.Matched >= from && len(o.Tasks) < f.Per {
			o.Tasks = append(o.Tasks, *s)
		}
		o.Matched++
	}
	o.Pages = max(1, (o.Matched+f.Per-1)/f.Per)
	return o
}
