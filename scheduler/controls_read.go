package scheduler

import (
	"context"
	"errors"
	"log/slog"

	"github.com/slotd/slotd/lock"
)

// readEach reads names' controls with read, all at once; if that fails
// for a reason one task's key can cause (a value slotd did not write, a
// key of another type) rather than the store's (unreachable, refusing),
// it reads them one task at a time, so that a bad key costs its own task's
// controls, not the fleet's. It returns what was read, ok[i] for each task
// read, and logs each task that was not, naming it, as what.
func readEach[T any](names []string, read func([]string) ([]T, error), log *slog.Logger, what string) (out []T, ok []bool) {
	out, ok = make([]T, len(names)), make([]bool, len(names))
	got, err := read(names)
	if err == nil && len(got) == len(names) {
		copy(out, got)
		for i := range ok {
			ok[i] = true
		}
		return out, ok
	}
	if k := lock.Classify(err); (k != lock.KindNone && k != lock.KindOther) || ctxEnded(err) {
		log.Warn("could not read the tasks' "+what, "err", err)
		return out, ok
	}
	for i, name := range names {
		got, err := read(names[i : i+1])
		if ctxEnded(err) { // shutting down, or the store too slow: no read more
			log.Warn("could not read the tasks' "+what, "err", err, "read", i)
			return out, ok
		}
		if err != nil || len(got) != 1 {
			log.Warn("could not read the task's "+what, "task", name, "err", err)
			continue
		}
		out[i], ok[i] = got[0], true
	}
	return out, ok
}

// ctxEnded reports whether err is a context's end: the scheduler stopping, or
// a read timed out. Neither is one task's key's fault, and reading the
// tasks one at a time after it would only repeat it for each (a stop
// during a read of 10,000 tasks' controls logged 10,000 warnings).
func ctxEnded(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
