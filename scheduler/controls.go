package scheduler

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/slotd/slotd/lock"
)

// controlsTimeout bounds one read of the operator controls.
const controlsTimeout = 5 * time.Second

// controller is this replica's ear for the operator controls in the store
// (lock.Controls): it tells the loop, through its mailbox, when a task is
// paused or resumed and when a trigger asks for a run now. It reads the
// controls of a task when the task's notice comes (pub/sub, at once) and of
// every task at each clock check (a notice lost while the subscription
// reconnected, and the pause states' TTLs, which this read renews). It
// follows the scheduler's task list: after a reload (retask) it watches
// the added tasks, seeds their configured pause, and forgets the removed
// ones. Its goroutine is owned by Run.
type controller struct {
	s     *Scheduler
	c     lock.Controls
	inbox *mailbox

	mu    sync.Mutex
	dirty map[string]bool // tasks whose notice came since the last read
	poke  chan struct{}
	moved chan struct{} // the task list changed (retask)

	// Owned by run's goroutine (first's before it starts).
	names      []string
	paused     map[string]bool
	configured map[string]bool // each task's paused value from the config, as last applied in the store
	unapplied  bool            // a Configure failed: follow again at the next clock check
	watches    map[string]*lock.Watch
	seen       map[string]time.Time // triggered slots passed to the loop, by task and slot id: their deadline
	swept      int                  // len(seen) after its last sweep
	list       *[]Task              // the task list byName was made from
	byName     map[string]*Task     // list's tasks by name (tasks)
}

func newController(s *Scheduler, inbox *mailbox) *controller {
	return &controller{s: s, c: s.controls, inbox: inbox,
		dirty: map[string]bool{}, poke: make(chan struct{}, 1), moved: make(chan struct{}, 1),
		paused: map[string]bool{}, configured: map[string]bool{}, watches: map[string]*lock.Watch{}, seen: map[string]time.Time{}}
}

// first applies the tasks' configured pause (lock.Controls.Configure)
// and learns every task's pause state, before the loop fires anything. A
// store that does not answer leaves each task as its config says (the
// clock check's read corrects it). It returns the pause states by task
// name.
func (c *controller) first(ctx context.Context) map[string]bool {
	c.follow(ctx)
	out := map[string]bool{} // the paused ones only (loop.paused)
	for name, p := range c.paused {
		if p {
			out[name] = true
		}
		c.s.stats.Task(name).Paused.Store(p)
	}
	return out
}

// follow brings names, the watches and the configured values in line
// with the scheduler's tasks. It applies the config's paused value of
// each task added or whose value changed (lock.Controls.Configure: a
// changed value pauses or resumes the task fleet-wide, an unchanged one
// leaves an operator's pause or resume standing), and returns the added
// tasks' names and the tasks whose pause state, as the store answered,
// differs from what the controller knew.
func (c *controller) follow(ctx context.Context) (added, moved []string) {
	cctx, cancel := context.WithTimeout(ctx, controlsTimeout)
	defer cancel()
	list := c.s.Tasks()
	keep := make(map[string]bool, len(list))
	var apply []string
	value := map[string]bool{} // the config's paused of each task in apply
	c.names = c.names[:0]
	for i := range list {
		t := &list[i]
		keep[t.Name] = true
		c.names = append(c.names, t.Name)
		if v, ok := c.configured[t.Name]; !ok || v != t.Paused {
			apply, value[t.Name] = append(apply, t.Name), t.Paused
		}
		if _, ok := c.watches[t.Name]; ok {
			continue
		}
		added = append(added, t.Name)
		c.paused[t.Name] = t.Paused
		w := c.c.WatchTask(t.Name)
		w.OnChange(func(lock.Change) { c.mark(t.Name) })
		c.watches[t.Name] = w
	}
	for name, w := range c.watches {
		if !keep[name] {
			w.Stop()
			delete(c.watches, name)
			delete(c.paused, name)
			delete(c.configured, name)
		}
	}
	if len(apply) == 0 {
		return added, nil
	}
	// A task not applied is tried again at the next clock check;
	// meanwhile it is as this replica last knew it (an added one, as its
	// config says).
	states, done := readEach(apply, func(ns []string) ([]bool, error) {
		vs := make([]bool, len(ns))
		for i, n := range ns {
			vs[i] = value[n]
		}
		return c.c.Configure(cctx, ns, vs)
	}, c.s.log.With("then", "trying again at the next clock check"), "configured pause")
	c.unapplied = false
	for j, name := range apply {
		if !done[j] {
			c.unapplied = true
			continue
		}
		if was, ok := c.configured[name]; ok && was != value[name] {
			c.s.log.Info("the config's paused changed: applied fleet-wide", "task", name, "paused", value[name])
		}
		c.configured[name] = value[name]
		if states[j] != c.paused[name] {
			c.paused[name] = states[j]
			moved = append(moved, name)
		}
	}
	return added, moved
}

// retask tells the controller that the scheduler's task list changed (a
// reload). It does not block: the loop calls it.
func (c *controller) retask() {
	select {
	case c.moved <- struct{}{}:
	default:
	}
}

// run listens for the tasks' notices and reads their controls until ctx
// ends.
func (c *controller) run(ctx context.Context) {
	defer func() {
		for _, w := range c.watches {
			w.Stop()
		}
	}()
	// epoch is the controls' epoch as of the last full read the store
	// answered (model/controls.pml's ep): one that failed, or an epoch
	// that could not be read, records nothing, so the next clock check
	// reads again. Recorded before its read succeeded, a store that
	// was down at a check, and then back empty (epoch 0 again), would
	// have kept a pause it lost unwritten until the sweep.
	epoch, swept := int64(-1), c.s.clock.Now()
	if e, err := c.epoch(ctx); c.read(ctx, c.names) && err == nil { // triggers from before this replica started
		epoch = e
	}
	every := c.s.checkEvery
	t := c.s.clock.NewTimer(every)
	defer func() { t.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.poke:
			c.read(ctx, c.takeDirty())
		case <-c.moved:
			added, moved := c.follow(ctx)
			c.post(moved)
			c.read(ctx, added)
		case <-t.C():
			t = c.s.clock.NewTimer(every)
			if c.unapplied {
				_, moved := c.follow(ctx)
				c.post(moved)
			}
			e, err := c.epoch(ctx)
			if err == nil && e == epoch && c.s.clock.Now().Sub(swept) < lock.ControlsSweep {
				continue
			}
			if c.read(ctx, c.names) && err == nil {
				epoch, swept = e, c.s.clock.Now()
			}
		}
	}
}

// post tells the loop the pause states of the named tasks, as the
// controller now knows them.
func (c *controller) post(names []string) {
	tasks := c.tasks()
	for _, name := range names {
		if t := tasks[name]; t != nil {
			c.inbox.post(event{kind: controlled, task: t, done: c.paused[name]})
		}
	}
}

// writeBack writes back the pause of task, which this replica knows
// paused but the store reads as not: an operator's resume (recorded: it
// stands), or a store that lost its keys (restarted without persistence),
// which would otherwise resume the task silently. It reports whether the
// task is paused after, and restores the config's value last applied
// beside the state, so that a later change of it still acts.
func (c *controller) writeBack(ctx context.Context, task string) bool {
	paused, err := c.c.SetPaused(ctx, task, lock.Seed)
	if err != nil {
		c.s.log.Warn("could not write back a pause the store has lost", "task", task, "err", err)
		return true // as known, until the next read
	}
	if !paused {
		return false
	}
	c.s.log.Warn("the store had lost the task's pause (restarted without persistence?): written back", "task", task)
	if v, ok := c.configured[task]; ok {
		if _, err := c.c.Configure(ctx, []string{task}, []bool{v}); err != nil {
			c.s.log.Warn("could not write back the config's paused value", "task", task, "err", err)
		}
	}
	return true
}

// epoch reads the controls' epoch (lock.Controls.Epoch).
func (c *controller) epoch(ctx context.Context) (int64, error) {
	cctx, cancel := context.WithTimeout(ctx, controlsTimeout)
	defer cancel()
	return c.c.Epoch(cctx)
}

// mark notes a notice of task i; it runs on the store's notification
// goroutine, so it only records and signals.
func (c *controller) mark(name string) {
	c.mu.Lock()
	c.dirty[name] = true
	c.mu.Unlock()
	select {
	case c.poke <- struct{}{}:
	default:
	}
}

func (c *controller) takeDirty() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.dirty))
	for name := range c.dirty {
		out = append(out, name)
	}
	clear(c.dirty)
	return out
}

// tasks returns the scheduler's tasks by name, made again only when the
// list has changed (a reload), so that a notice's read does not index
// every task.
func (c *controller) tasks() map[string]*Task {
	if p := c.s.tasks.Load(); p != c.list {
		c.list, c.byName = p, make(map[string]*Task, len(*p))
		for i := range *p {
			c.byName[(*p)[i].Name] = &(*p)[i]
		}
	}
	return c.byName
}

// read reads the pause states and pending triggers of the named tasks
// and tells the loop what changed: a pause or resume, and each trigger it
// has not yet passed on, armed (lock.Controls.ArmTrigger) first. A name
// no longer configured is skipped. It reports whether the store answered
// (a pause state was read): a task whose key alone cannot be read (a
// foreign value) does not make every clock check read every task.
func (c *controller) read(ctx context.Context, names []string) bool {
	tasks := c.tasks()
	names = slices.DeleteFunc(slices.Clone(names), func(n string) bool { return tasks[n] == nil })
	if len(names) == 0 {
		return true
	}
	cctx, cancel := context.WithTimeout(ctx, controlsTimeout)
	defer cancel()
	paused, read := readEach(names, func(ns []string) ([]bool, error) { return c.c.Paused(cctx, ns, true) }, c.s.log, "pause state")
	for j, name := range names {
		if !read[j] {
			continue
		}
		if !paused[j] && c.paused[name] && c.writeBack(cctx, name) {
			paused[j] = true
		}
		if paused[j] != c.paused[name] {
			c.paused[name] = paused[j]
			c.inbox.post(event{kind: controlled, task: tasks[name], done: paused[j]})
		}
	}
	triggers, _ := readEach(names, func(ns []string) ([][]time.Time, error) { return c.c.Triggers(cctx, ns) }, c.s.log, "triggers")
	now := c.s.now()
	if len(c.seen) >= 2*max(c.swept, 64) {
		// Swept when it has doubled since the last sweep, not at each
		// read: a notice's read must not walk the triggered slots of
		// thousands of tasks. A slot kept past its deadline is skipped
		// as one not yet seen would be.
		for k, d := range c.seen {
			if !now.Before(d) {
				delete(c.seen, k)
			}
		}
		c.swept = len(c.seen)
	}
	for j, name := range names {
		t := tasks[name]
		for _, at := range triggers[j] {
			slot := t.TriggerSlot(at)
			key := slot.String()
			if _, ok := c.seen[key]; ok || !now.Before(slot.Deadline) {
				continue
			}
			if err := c.c.ArmTrigger(cctx, slot, t.DoneTTL); err != nil {
				// Not claimed unarmed: its tokens could equal a scheduled
				// slot's. The next read tries again.
				c.s.log.Warn("could not arm a trigger; trying again at the next read", "task", t.Name, "slot", slot.ID, "err", err)
				continue
			}
			c.seen[key] = slot.Deadline
			c.inbox.post(event{kind: triggered, task: t, at: slot.Time})
		}
	}
	return slices.Contains(read, true)
}
