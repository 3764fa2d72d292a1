package scheduler

import (
	"container/heap"
	"context"
	"errors"
	"reflect"
	"slices"
	"time"

	"github.com/slotd/slotd/internal/stats"
)

// ErrStopped is returned by Reload once Run has returned.
var ErrStopped = errors.New("scheduler: stopped")

// Change is what a Reload changed, by task name, each list in the new
// configuration's order (Removed in the old one's).
type Change struct {
	Added   []string // not there before: they start at their next fire time
	Removed []string // no longer there: they claim nothing more
	Changed []string // a different definition: it applies from the next slot
}

// Empty reports whether the reload changed no task.
func (c Change) Empty() bool { return len(c.Added)+len(c.Removed)+len(c.Changed) == 0 }

// reload is a Reload waiting for the loop: the tasks, and where the loop
// answers.
type reload struct {
	tasks  []Task
	change Change
	err    error
	done   chan struct{} // closed once change and err are set
}

// Reload replaces the tasks the scheduler runs with tasks, which must be
// valid and uniquely named (as internal/assemble builds them), and returns
// what changed once the loop has taken them. A task whose definition is
// unchanged keeps its fire times, so that no slot of it is lost or run
// twice; an added task starts at its next fire time (there is no catch-up);
// a removed task claims nothing more; a changed task takes its new
// definition from its next slot. Attempts already running, and the
// retries of the slots they belong to, go on under the definition they
// started with.
//
// While Run runs, the tasks reach the loop through its mailbox, like
// every other event, so that the one goroutine that owns the runs changes
// them. Before Run, they replace the configured ones; after Run has
// returned, Reload returns ErrStopped. It returns ctx's cause if ctx ends
// before the loop has answered.
func (s *Scheduler) Reload(ctx context.Context, tasks []Task) (Change, error) {
	req := &reload{tasks: tasks, done: make(chan struct{})}
	s.mu.Lock()
	l := s.loop
	switch {
	case l == nil && s.ran:
		s.mu.Unlock()
		return Change{}, ErrStopped
	case l == nil:
		change := s.setTasks(tasks)
		s.mu.Unlock()
		return change, nil
	}
	// Posted under mu, so that Run, which takes what is left in the
	// mailbox once the loop has returned, cannot miss it.
	l.inbox.post(event{kind: reloaded, reload: req})
	s.mu.Unlock()
	select {
	case <-req.done:
		return req.change, req.err
	case <-ctx.Done():
		return Change{}, context.Cause(ctx)
	}
}

// setTasks makes tasks the scheduler's list and the stats' and returns
// what changed. An unchanged task keeps its old definition, plugin job
// included. Only the loop, or Reload before Run, calls it.
func (s *Scheduler) setTasks(tasks []Task) Change {
	var change Change
	old := map[string]*Task{}
	if p := s.tasks.Load(); p != nil {
		for i := range *p {
			old[(*p)[i].Name] = &(*p)[i]
		}
	}
	list := make([]Task, len(tasks))
	infos := make([]stats.TaskInfo, len(tasks))
	for i := range tasks {
		t := &list[i]
		*t = tasks[i]
		switch prev := old[t.Name]; {
		case prev == nil:
			if s.tasks.Load() != nil {
				change.Added = append(change.Added, t.Name)
			}
		case sameTask(prev, t):
			*t = *prev
		default:
			change.Changed = append(change.Changed, t.Name)
		}
		delete(old, t.Name)
		// At least one gap between fire times: alerts use twice this as "no
		// success for two windows", which a deadline shorter than the
		// interval must not turn into a page between healthy slots.
		infos[i] = stats.TaskInfo{Name: t.Name, Window: max(t.Window(), t.Schedule.MaxGap())}
	}
	if p := s.tasks.Load(); p != nil {
		for i := range *p {
			if _, gone := old[(*p)[i].Name]; gone {
				change.Removed = append(change.Removed, (*p)[i].Name)
			}
		}
	}
	s.tasks.Store(&list)
	s.stats.Update(infos)
	return change
}

// sameTask reports whether a and b are the same definition: every field
// alike but the objects built from them at load (the schedule, from the
// spec and zone; the plugin jobs, from the plugin and params).
func sameTask(a, b *Task) bool {
	return reflect.DeepEqual(definition(a), definition(b))
}

func definition(t *Task) Task {
	d := *t
	d.Schedule, d.Job = nil, nil
	if d.OnFailure != nil {
		h := *d.OnFailure
		h.Job = nil
		d.OnFailure = &h
	}
	return d
}

// onReload is the loop's side of Reload: it makes req's tasks the list,
// rebuilds the fire heap from it, and ends the idle runs of removed tasks
// (their busy runs end when they would next claim: see advance).
func (l *loop) onReload(req *reload) {
	defer close(req.done)
	if l.stopping {
		req.err = ErrStopped
		return
	}
	fired := make(map[string]*fire, len(l.fires))
	for _, f := range l.fires {
		fired[f.task.Name] = f
	}
	req.change = l.s.setTasks(req.tasks)
	list := l.s.Tasks()
	now := l.s.now()
	l.fires = l.fires[:0]
	clear(l.current)
	for i := range list {
		t := &list[i]
		l.current[t.Name] = t
		var next time.Time
		switch f := fired[t.Name]; {
		case f == nil:
			// New, or its schedule had no fire time left.
			next = t.Schedule.Next(now)
		case f.task.Schedule.String() == t.Schedule.String():
			// The same fire times: the next is the one not yet fired.
			next = f.next
		default:
			// A new schedule: its first fire time not yet due, or due but not
			// yet fired (the old one's next had not come either).
			from := now
			if !f.next.After(now) {
				from = f.next.Add(-time.Nanosecond)
			}
			next = t.Schedule.Next(from)
		}
		if !next.IsZero() {
			l.fires = append(l.fires, newFire(t, next))
		}
	}
	heap.Init(&l.fires)
	// Pause states: a removed task's goes; an added one starts as its
	// config says until the controller has read the store's (retask),
	// which also applies a changed paused value fleet-wide. Without
	// controls in the store, the config's value is the state: a changed
	// one applies here.
	for name := range l.paused {
		if l.current[name] == nil {
			delete(l.paused, name)
		}
	}
	for _, name := range req.change.Added {
		t := l.current[name]
		l.setPaused(name, t.Paused)
		l.s.stats.Task(name).Paused.Store(t.Paused)
	}
	if l.ctl == nil {
		for _, name := range req.change.Changed {
			l.onControlled(l.current[name], l.current[name].Paused)
		}
	}
	if l.ctl != nil {
		l.ctl.retask()
	}
	idle := slices.Clone(l.wakes)
	for _, r := range idle {
		if l.removed(r) {
			l.end(r)
		}
	}
	if !req.change.Empty() {
		l.s.log.Info("tasks reloaded", "added", req.change.Added, "removed", req.change.Removed,
			"changed", req.change.Changed, "tasks", len(list))
	}
}

// removed reports whether r's task is no longer configured.
func (l *loop) removed(r *run) bool { return l.current[r.t.Name] == nil }

// refuseReloads answers, once the loop has returned, the reloads still in
// its mailbox.
func (l *loop) refuseReloads() {
	for _, e := range l.inbox.take(nil) {
		if e.kind == reloaded {
			e.reload.err = ErrStopped
			close(e.reload.done)
		}
	}
}
