// Package tasks is slotd's plugin registry and its built-in plugins.
//
// A plugin is a named Factory that turns a task's [task.params] table into a
// Task. Plugins register themselves in an init function, like database/sql
// drivers:
//
//	func init() { tasks.Register("greet", newGreet) }
//
// Register panics on a nil factory or a duplicate name, so a broken build fails
// at start-up rather than at the first fire time. Factories must have no side
// effects: slotd builds every task while it validates the configuration.
//
// A Task learns which slot it runs from its context (RunFrom), never from the
// wall clock: the slot time is the schedule's fire time, whatever the time is
// when the task actually starts. It reports what it printed or returned,
// for the run history, to OutputFrom(ctx): a bounded tail that never fails.
//
// The http plugin shares one connection pool per process (SetHTTPPool).
//
// The exec plugin guarantees, on Linux, that no process an attempt started
// outlives the attempt: each runs under a supervisor, the program's own
// binary re-executed with the hidden argument __supervise, which this
// package answers from an init function, so every binary that links it
// (slotd, a build with custom plugins, a test binary) is its own supervisor.
// The daemon's variables named by DropEnv never reach an exec task.
package tasks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"
)

// Task is one configured job. Run must return when ctx is done; the cause of
// the cancellation (context.Cause) says why: the task's timeout, a lost lease
// (lock.ErrLeaseLost) or the daemon shutting down.
type Task interface {
	Run(ctx context.Context) error
}

// TaskFunc adapts a function to Task.
type TaskFunc func(ctx context.Context) error

// Run calls f(ctx).
func (f TaskFunc) Run(ctx context.Context) error { return f(ctx) }

// Factory builds a Task from its parameters (the task's [task.params] table,
// possibly empty, never nil). It returns an error naming the offending
// parameter when the table is invalid, and must not start anything.
// log is already scoped to the task.
type Factory func(params map[string]any, log *slog.Logger) (Task, error)

// Run describes one attempt of one slot. The scheduler puts it in the
// context given to Task.Run.
type Run struct {
	Task     string    // task name
	Slot     string    // slot id, e.g. "2024011514"
	SlotTime time.Time // the scheduled fire time, UTC
	Attempt  int       // 1-based attempt number within the slot
	Token    int64     // fencing token: grows across slots and attempts
	Replica  string    // the replica running this attempt
	Revision int64     // the claim's store revision (etcd revision, ZooKeeper zxid); 0 on Redis
}

// ErrNoGrace, found with errors.Is in the cause of a task's cancelled
// context, asks the plugin to stop at once, with no grace period: the
// attempt's lease is lost, so a peer may claim the slot as soon as the
// lease's last validity runs out, and anything still running then would
// overlap the peer's attempt. The exec plugin kills the command's whole
// process tree at once instead of sending SIGTERM and waiting its grace.
var ErrNoGrace = errors.New("tasks: stop at once (the lease is lost)")

type runKey struct{}

// WithRun returns a context carrying r.
func WithRun(ctx context.Context, r Run) context.Context {
	return context.WithValue(ctx, runKey{}, r)
}

// RunFrom returns the Run carried by ctx, if any.
func RunFrom(ctx context.Context) (Run, bool) {
	r, ok := ctx.Value(runKey{}).(Run)
	return r, ok
}

var (
	mu        sync.RWMutex
	factories = map[string]Factory{}
)

// Register makes a plugin available under name. It panics if factory is nil,
// name is empty, or name is already registered.
func Register(name string, factory Factory) {
	mu.Lock()
	defer mu.Unlock()
	if name == "" {
		panic("tasks: Register with an empty name")
	}
	if factory == nil {
		panic(fmt.Sprintf("tasks: Register of plugin %q with a nil factory", name))
	}
	if _, dup := factories[name]; dup {
		panic(fmt.Sprintf("tasks: Register called twice for plugin %q", name))
	}
	factories[name] = factory
}

// Lookup returns the factory registered under name.
func Lookup(name string) (Factory, bool) {
	mu.RLock()
	defer mu.RUnlock()
	f, ok := factories[name]
	return f, ok
}

// Plugins returns the registered plugin names, sorted.
func Plugins() []string {
	mu.RLock()
	defer mu.RUnlock()
	names := make([]string, 0, len(factories))
	for n := range factories {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
