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
// reconnected, and the pause states' TTLs, which this read renews). After
// a reload (retask) it watches and reads the new list of tasks.
// Its goroutine is owned by Run.
type controller struct {
	s     *Scheduler
	c     lock.Controls
	inbox *mailbox

	mu       sync.Mutex
	dirty    map[string]bool // tasks whose notice came since the last read, by name
	poke     chan struct{}
	retasked chan struct{} // holds a token once a reload has changed the tasks

	// Owned by run's goroutine (first's before it starts).
	tasks  []Task               // the scheduler's, as last taken
	byName map[string]*Task     // into tasks
	paused map[string]bool      // as last read, by task name
	seen   map[string]time.Time // triggered slots passed to the loop, by task and slot id: their deadline
}

func newController(s *Scheduler, inbox *mailbox) *controller {
	c := &controller{s: s, c: s.controls, inbox: inbox,
		dirty: map[string]bool{}, poke: make(chan struct{}, 1), retasked: make(chan struct{}, 1),
		paused: map[string]bool{}, seen: map[string]time.Time{}}
	c.take()
	return c
}

// take makes the scheduler's tasks the controller's.
func (c *controller) take() {
	c.tasks = c.s.Tasks()
	c.byName = make(map[string]*Task, len(c.tasks))
	for i := range c.tasks {
		c.byName[c.tasks[i].Name] = &c.tasks[i]
	}
}

// names lists the controller's tasks by name.
func (c *controller) names() []string {
	out := make([]string, len(c.tasks))
	for i := range c.tasks {
		out[i] = c.tasks[i].Name
	}
	return out
}

// retask tells the controller that a reload changed the tasks; the loop
// calls it, and it does not block.
func (c *controller) retask() {
	select {
	case c.retasked <- struct{}{}:
	default:
	}
}

// seed records in the store the pause of the tasks configured paused =
// true that it has no pause state for (an operator's pause or resume
// wins over the file).
func (c *controller) seed(ctx context.Context, tasks []*Task) {
	for _, t := range tasks {
		if t.Paused {
			if _, err := c.c.SetPaused(ctx, t.Name, lock.Seed); err != nil {
				c.s.log.Warn("could not record the configured pause in the store", "task", t.Name, "err", err)
			}
		}
	}
}

// first seeds the pause state of the tasks configured paused = true and
// reads every task's, before the loop fires anything. A store that does
// not answer leaves each task as its config says (the clock check's read
// corrects it). It returns the pause states by task name.
func (c *controller) first(ctx context.Context) map[string]bool {
	cctx, cancel := context.WithTimeout(ctx, controlsTimeout)
	defer cancel()
	all := make([]*Task, len(c.tasks))
	for i := range c.tasks {
		all[i] = &c.tasks[i]
		c.paused[c.tasks[i].Name] = c.tasks[i].Paused
	}
	c.seed(cctx, all)
	names := c.names()
	if paused, err := c.c.Paused(cctx, names, true); err != nil {
		c.s.log.Warn("could not read the tasks' pause states; each task starts as its config says", "err", err)
	} else {
		for i, name := range names {
			c.paused[name] = paused[i]
		}
	}
	out := make(map[string]bool, len(names))
	for _, name := range names {
		out[name] = c.paused[name]
		c.s.stats.Task(name).Paused.Store(c.paused[name])
	}
	return out
}

// run listens for the tasks' notices and reads their controls until ctx
// ends.
func (c *controller) run(ctx context.Context) {
	var watches []*lock.Watch
	watch := func() {
		for _, w := range watches {
			w.Stop()
		}
		watches = watches[:0]
		for _, name := range c.names() {
			w := c.c.WatchTask(name)
			w.OnChange(func(bool) { c.mark(name) })
			watches = append(watches, w)
		}
	}
	watch()
	defer func() {
		for _, w := range watches {
			w.Stop()
		}
	}()
	epoch, _ := c.epoch(ctx)
	c.read(ctx, c.names()) // triggers from before this replica started
	swept := c.s.clock.Now()
	every := c.s.checkEvery
	t := c.s.clock.NewTimer(every)
	defer func() { t.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.poke:
			c.read(ctx, c.takeDirty())
		case <-c.retasked:
			old := c.byName
			c.take()
			var added []*Task
			for i := range c.tasks {
				if old[c.tasks[i].Name] == nil {
					added = append(added, &c.tasks[i])
				}
			}
			for name := range c.paused {
				if c.byName[name] == nil {
					delete(c.paused, name)
				}
			}
			sctx, cancel := context.WithTimeout(ctx, controlsTimeout)
			c.seed(sctx, added)
			cancel()
			watch()
			c.read(ctx, c.names())
		case <-t.C():
			t = c.s.clock.NewTimer(every)
			e, err := c.epoch(ctx)
			if err == nil && e == epoch && c.s.clock.Now().Sub(swept) < lock.ControlsSweep {
				continue
			}
			epoch, swept = e, c.s.clock.Now()
			c.read(ctx, c.names())
		}
	}
}

// epoch reads the controls' epoch (lock.Controls.Epoch).
func (c *controller) epoch(ctx context.Context) (int64, error) {
	cctx, cancel := context.WithTimeout(ctx, controlsTimeout)
	defer cancel()
	return c.c.Epoch(cctx)
}

// mark notes a notice of the named task; it runs on the store's
// notification goroutine, so it only records and signals.
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

// read reads the pause states and pending triggers of the named tasks
// (those no longer configured are left out) and tells the loop what
// changed: a pause or resume, and each trigger it has not yet passed on,
// armed (lock.Controls.ArmTrigger) first.
func (c *controller) read(ctx context.Context, names []string) {
	names = slices.DeleteFunc(names, func(name string) bool { return c.byName[name] == nil })
	if len(names) == 0 {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, controlsTimeout)
	defer cancel()
	if paused, err := c.c.Paused(cctx, names, true); err != nil {
		c.s.log.Warn("could not read the tasks' pause states", "err", err)
	} else {
		for j, name := range names {
			if was, known := c.paused[name]; !known || paused[j] != was {
				c.paused[name] = paused[j]
				c.inbox.post(event{kind: controlled, task: c.byName[name], done: paused[j]})
			}
		}
	}
	triggers, err := c.c.Triggers(cctx, names)
	if err != nil {
		c.s.log.Warn("could not read the tasks' triggers", "err", err)
		return
	}
	now := c.s.now()
	for k, d := range c.seen {
		if !now.Before(d) {
			delete(c.seen, k)
		}
	}
	for j, name := range names {
		t := c.byName[name]
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
}
