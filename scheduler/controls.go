package scheduler

import (
	"context"
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
// reconnected, and the pause states' TTLs, which this read renews).
// Its goroutine is owned by Run.
type controller struct {
	s     *Scheduler
	c     lock.Controls
	inbox *mailbox
	names []string

	mu    sync.Mutex
	dirty map[int]bool // tasks whose notice came since the last read
	poke  chan struct{}

	// Owned by run's goroutine (first's before it starts).
	paused []bool
	seen   map[string]time.Time // triggered slots passed to the loop, by task and slot id: their deadline
}

func newController(s *Scheduler, inbox *mailbox) *controller {
	c := &controller{s: s, c: s.controls, inbox: inbox, names: make([]string, len(s.tasks)),
		dirty: map[int]bool{}, poke: make(chan struct{}, 1), paused: make([]bool, len(s.tasks)),
		seen: map[string]time.Time{}}
	for i := range s.tasks {
		c.names[i] = s.tasks[i].Name
	}
	return c
}

// first seeds the pause state of the tasks configured paused = true and
// reads every task's, before the loop fires anything. A store that does
// not answer leaves each task as its config says (the clock check's read
// corrects it).
func (c *controller) first(ctx context.Context) map[*Task]bool {
	cctx, cancel := context.WithTimeout(ctx, controlsTimeout)
	defer cancel()
	out := map[*Task]bool{}
	for i := range c.s.tasks {
		t := &c.s.tasks[i]
		c.paused[i] = t.Paused
		if t.Paused {
			if _, err := c.c.SetPaused(cctx, t.Name, lock.Seed); err != nil {
				c.s.log.Warn("could not record the configured pause in the store", "task", t.Name, "err", err)
			}
		}
	}
	if paused, err := c.c.Paused(cctx, c.names, true); err != nil {
		c.s.log.Warn("could not read the tasks' pause states; each task starts as its config says", "err", err)
	} else {
		copy(c.paused, paused)
	}
	for i := range c.s.tasks {
		out[&c.s.tasks[i]] = c.paused[i]
		c.s.stats.Task(c.names[i]).Paused.Store(c.paused[i])
	}
	return out
}

// run listens for the tasks' notices and reads their controls until ctx
// ends.
func (c *controller) run(ctx context.Context) {
	for i := range c.names {
		w := c.c.WatchTask(c.names[i])
		w.OnChange(func(bool) { c.mark(i) })
		defer w.Stop()
	}
	all := make([]int, len(c.names))
	for i := range all {
		all[i] = i
	}
	epoch, _ := c.epoch(ctx)
	c.read(ctx, all) // triggers from before this replica started
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
		case <-t.C():
			t = c.s.clock.NewTimer(every)
			e, err := c.epoch(ctx)
			if err == nil && e == epoch && c.s.clock.Now().Sub(swept) < lock.ControlsSweep {
				continue
			}
			epoch, swept = e, c.s.clock.Now()
			c.read(ctx, all)
		}
	}
}

// epoch reads the controls' epoch (lock.Controls.Epoch).
func (c *controller) epoch(ctx context.Context) (int64, error) {
	cctx, cancel := context.WithTimeout(ctx, controlsTimeout)
	defer cancel()
	return c.c.Epoch(cctx)
}

// mark notes a notice of task i; it runs on the store's notification
// goroutine, so it only records and signals.
func (c *controller) mark(i int) {
	c.mu.Lock()
	c.dirty[i] = true
	c.mu.Unlock()
	select {
	case c.poke <- struct{}{}:
	default:
	}
}

func (c *controller) takeDirty() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]int, 0, len(c.dirty))
	for i := range c.dirty {
		out = append(out, i)
	}
	clear(c.dirty)
	return out
}

// read reads the pause states and pending triggers of the tasks at idx
// and tells the loop what changed: a pause or resume, and each trigger it
// has not yet passed on, armed (lock.Controls.ArmTrigger) first.
func (c *controller) read(ctx context.Context, idx []int) {
	if len(idx) == 0 {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, controlsTimeout)
	defer cancel()
	names := make([]string, len(idx))
	for j, i := range idx {
		names[j] = c.names[i]
	}
	if paused, err := c.c.Paused(cctx, names, true); err != nil {
		c.s.log.Warn("could not read the tasks' pause states", "err", err)
	} else {
		for j, i := range idx {
			if paused[j] != c.paused[i] {
				c.paused[i] = paused[j]
				c.inbox.post(event{kind: controlled, task: &c.s.tasks[i], done: paused[j]})
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
	for j, i := range idx {
		t := &c.s.tasks[i]
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
