package etcdlock

import (
	"github.com/slotd/slotd/lock"
)

// Keys returns the state and attempts keys of slot under prefix:
// "<prefix>:{<task>:<slot id>}" and its ":attempts" (the layout slotd's
// Redis store uses, so that an operator reads one layout on every store).
func Keys(prefix string, slot lock.Slot) (state, attempts string) {
	state = prefix + ":{" + slot.Task + ":" + slot.ID + "}"
	return state, state + ":attempts"
}

// probeKey is the key Probe writes for replica under prefix.
func probeKey(prefix, replica string) string { return prefix + ":probe:{" + replica + "}" }

// parseState reads a state value as States reports it.
func parseState(value string) (lock.State, error) {
	v, err := lock.ParseValue(value)
	return v.State(), err
}
