package lock

import (
	"strconv"
	"sync"
)

// What a Store outside this package (etcd, ZooKeeper) needs to speak the
// same slot protocol: the state values, and watches it can deliver to.

// NewWatch returns a Watch for a store outside this package: the store
// delivers to it with Notify, and stop runs once, on the first Stop.
func NewWatch(stop func()) *Watch {
	return &Watch{c: make(chan struct{}, 1), stop: sync.OnceFunc(stop)}
}

// Notify delivers a release or an operator's rerun of the watched slot
// (done false), or its completion (done true, which only OnChange hears),
// as this package's stores do.
func (w *Watch) Notify(done bool) { w.notify(done) }

// ParseValue reads a slot's state value, "run:<owner>:<attempt>" or
// "done:<owner>:<attempt>:<unix ms>", as every store writes it. A value
// slotd did not write reads as Status "foreign" with an ErrForeign.
func ParseValue(value string) (State, error) { return parseValue(value) }

// RunValue is the state value of owner's running attempt.
func RunValue(owner Owner) string { return owner.value() }

// DoneValue is the state value of owner's attempt completed at unixMS (the
// store's clock).
func DoneValue(owner Owner, unixMS int64) string {
	return owner.donePrefix() + strconv.FormatInt(unixMS, 10)
}
