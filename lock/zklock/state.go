package zklock

import "github.com/slotd/slotd/lock"

// parseState reads a state value as States reports it.
func parseState(value string) (lock.State, error) {
	v, err := lock.ParseValue(value)
	return v.State(), err
}
