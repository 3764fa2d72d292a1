package redislock

import (
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/internal/schema"
)

// Keys returns the state and attempts keys of slot under prefix.
func Keys(prefix string, slot lock.Slot) (state, attempts string) { return schema.Keys(prefix, slot) }

// ControlKeys returns task's control keys under prefix.
func ControlKeys(prefix, task string) (triggers, paused, running, notice string) {
	return schema.ControlKeys(prefix, task)
}

// EpochKey is the key of the controls' epoch under prefix.
func EpochKey(prefix string) string { return schema.EpochKey(prefix) }

// OnceKey is the key of slot's marker for event under prefix.
func OnceKey(prefix string, slot lock.Slot, event string) string {
	return schema.OnceKey(prefix, slot, event)
}
