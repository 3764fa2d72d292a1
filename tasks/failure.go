package tasks

import (
	"context"
	"strconv"
	"strings"
	"time"
)

// Kinds of slot failure an on_failure hook is told of (Failure.Kind).
const (
	FailureExhausted = "exhausted" // the slot's last allowed attempt failed
	FailureMissed    = "missed"    // the slot's window closed without a success

	// ReasonCapacity (Failure.Reason): a missed slot's replica was at its
	// max_running for the whole window and no peer started the slot.
	ReasonCapacity = "capacity"
	// ReasonBackoff (Failure.Reason): a missed slot's last attempt failed
	// and the task's retry_backoff ended at or after the slot's deadline,
	// so no further attempt could start in time.
	ReasonBackoff = "backoff"
	// ReasonQueue (Failure.Reason): a missed slot waited for its task's
	// running slot (concurrency = "queue") until its window closed.
	ReasonQueue = "queue"
)

// Failure is a slot that ended without a success, as an on_failure hook
// learns of it: the scheduler puts it in the context of the hook's run,
// beside a Run naming the task, the slot and the replica. The exec plugin
// passes it in the environment (SLOTD_FAILURE, SLOTD_ATTEMPTS,
// SLOTD_LAST_ERROR, SLOTD_OUTPUT), the http plugin in headers
// (Slotd-Failure, Slotd-Attempts) and, unless its body is configured, as
// a JSON body.
type Failure struct {
	Kind      string    `json:"failure"`          // FailureExhausted or FailureMissed
	Reason    string    `json:"reason,omitempty"` // why, when known: ReasonCapacity, ReasonBackoff or ReasonQueue
	Task      string    `json:"task"`
	Slot      string    `json:"slot"`
	SlotTime  time.Time `json:"slot_time"`
	Attempts  int       `json:"attempts"`   // attempts made (0: none started)
	LastError string    `json:"last_error"` // the last attempt's error, as recorded in the history ("" if unknown)
	// Output is the end of the last attempt's output, as its history
	// entry keeps it (the task's output_tail; "" if none was kept).
	Output  string `json:"output"`
	Replica string `json:"replica"` // the replica running the hook
}

type failureKey struct{}

// WithFailure returns a context carrying f.
func WithFailure(ctx context.Context, f Failure) context.Context {
	return context.WithValue(ctx, failureKey{}, f)
}

// FailureFrom returns the Failure carried by ctx, if any: an on_failure
// hook's run has one, a task's attempt does not.
func FailureFrom(ctx context.Context) (Failure, bool) {
	f, ok := ctx.Value(failureKey{}).(Failure)
	return f, ok
}

// failureEnv is f as exec's environment. A NUL cannot be in a variable:
// it is dropped.
func failureEnv(f Failure) []string {
	clean := func(s string) string { return strings.ReplaceAll(s, "\x00", "") }
	return []string{
		"SLOTD_FAILURE=" + f.Kind,
		"SLOTD_FAILURE_REASON=" + f.Reason,
		"SLOTD_ATTEMPTS=" + strconv.Itoa(f.Attempts),
		"SLOTD_LAST_ERROR=" + clean(f.LastError),
		"SLOTD_OUTPUT=" + clean(f.Output),
	}
}
