package scheduler

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/stats"
	"github.com/slotd/slotd/lock/memlock"
	"github.com/slotd/slotd/tasks"
)

// Slot ends on their way to a hook (here each waits a lease, as one found
// exhausted on a peer's claim does) are bounded: beyond hookWaits they are
// counted dropped at once, not each a goroutine waiting.
func TestSlotEndsOnTheirWayToAHookAreBounded(t *testing.T) {
	l := testLoop(t, memlock.New(time.Now))
	l.s.hookWaits = make(chan struct{}, 4)
	task := l.s.Tasks()[0]
	task.OnFailure = &Hook{Plugin: "test", Params: map[string]any{}, Timeout: time.Second,
		Job: tasks.TaskFunc(func(context.Context) error { return nil })}
	slot := task.Slot(time.Now().Truncate(time.Hour))
	for range 10 {
		l.failed(slotEnd{t: &task, slot: slot, kind: tasks.FailureExhausted})
	}
	dropped := l.s.stats.Notifications[slices.Index(stats.NotifyOutcomes[:], stats.NotifyDropped)].Load()
	if dropped != 6 || len(l.s.hookWaits) != 4 {
		t.Fatalf("%d dropped, %d waiting; want 6 and 4", dropped, len(l.s.hookWaits))
	}
}
