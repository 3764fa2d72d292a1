package config

// Catchup is what a replica does at start-up with a slot whose window is
// still open: a task's catchup key.
type Catchup uint8

const (
	CatchupNone   Catchup = iota // "none": wait for the next fire time
	CatchupLatest                // "latest": claim the latest slot if its window is still open
)

func (c Catchup) String() string {
	switch c {
	case CatchupNone:
		return "none"
	case CatchupLatest:
		return "latest"
	}
	return "catchup(?)"
}

// Concurrency is what a slot does while its task's previous slot still
// runs: a task's concurrency key, with Kubernetes CronJob's names and
// meanings.
type Concurrency uint8

const (
	ConcurrencyAllow   Concurrency = iota // "allow": slots run side by side
	ConcurrencyForbid                     // "forbid": a slot is skipped while the previous one runs
	ConcurrencyReplace                    // "replace": the running slot is cancelled and the new one runs
	ConcurrencyQueue                      // "queue": the slot waits for the running one (at most one waits), then runs
)

func (c Concurrency) String() string {
	switch c {
	case ConcurrencyAllow:
		return "allow"
	case ConcurrencyForbid:
		return "forbid"
	case ConcurrencyReplace:
		return "replace"
	case ConcurrencyQueue:
		return "queue"
	}
	return "concurrency(?)"
}
