// Package assemble builds the engine's objects from a configuration file:
// each [[task]] becomes a scheduler.Task with the job its plugin's factory
// builds, each on_failure table a scheduler.Hook, [plugins.http] the http
// plugin's pool. The configuration itself (internal/config) is data and
// knows neither the plugins nor the stores; this package is its Checker,
// so that the command line's every reading of the file — validate, run,
// reload and the operator commands — checks the plugins' params and what
// the configured store supports at load, with every problem reported at
// once beside the file's own.
//
// Guarantees:
//   - a Daemon returned without error has a built job for every task and
//     hook, and no task the configured store cannot serve
//     (concurrency = "forbid"|"replace" needs lock.Controls, on_failure
//     needs lock.Oncer), decided by the interfaces the store's type
//     implements (store.Zero), without dialing it;
//   - a plugin's factory runs once per task and hook, with a logger scoped
//     with the task's name, and a factory that panics is an error, not a
//     crash;
//   - tasks that share [defaults]' on_failure share one scheduler.Hook.
package assemble

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/slotd/slotd/internal/config"
	"github.com/slotd/slotd/internal/store"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/retry"
	"github.com/slotd/slotd/scheduler"
	"github.com/slotd/slotd/tasks"
)

// Daemon is a validated configuration and the engine's objects built from
// it.
type Daemon struct {
	Config   *config.Config
	Tasks    []scheduler.Task // Config.Tasks, in file order, each with its job and hook
	HTTPPool tasks.HTTPPool   // Config.HTTPPool
}

// Load reads and validates the configuration file at path (config.Load)
// and builds its tasks; log (which may be nil) is the plugins' logger,
// scoped per task. The error joins one error per problem found.
func Load(path string, log *slog.Logger) (*Daemon, error) {
	b := newBuilder(log)
	cfg, err := config.Load(path, log, b)
	if err != nil {
		return nil, err
	}
	return b.daemon(cfg), nil
}

// LoadReadOnly is Load without reading the write endpoints' token
// (config.LoadReadOnly), for the commands that only read the fleet.
func LoadReadOnly(path string, log *slog.Logger) (*Daemon, error) {
	b := newBuilder(log)
	cfg, err := config.LoadReadOnly(path, log, b)
	if err != nil {
		return nil, err
	}
	return b.daemon(cfg), nil
}

// Parse is Load of a file's contents; source names it in errors.
func Parse(data []byte, source string, log *slog.Logger) (*Daemon, error) {
	b := newBuilder(log)
	cfg, err := config.Parse(data, source, log, b)
	if err != nil {
		return nil, err
	}
	return b.daemon(cfg), nil
}

// builder is the config.Checker of one load: it builds each plugin's job
// as the file is checked, and keeps it for the task or hook it belongs to.
type builder struct {
	log   *slog.Logger
	jobs  map[string]tasks.Task       // by task name
	hooks map[*config.Hook]tasks.Task // each hook's, [defaults]' once
}

func newBuilder(log *slog.Logger) *builder {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &builder{log: log, jobs: map[string]tasks.Task{}, hooks: map[*config.Hook]tasks.Task{}}
}

// Plugins implements config.Checker: the registered plugins.
func (b *builder) Plugins() []string { return tasks.Plugins() }

// CheckPlugin implements config.Checker: it builds ref's job with its
// plugin's factory, giving it a logger scoped with the task's name (and
// hook=on_failure for a hook's), and keeps it.
func (b *builder) CheckPlugin(ref config.PluginRef) error {
	factory, ok := tasks.Lookup(ref.Plugin)
	if !ok { // config checks the name against Plugins first
		return fmt.Errorf("unknown plugin %q", ref.Plugin)
	}
	log := b.log
	if ref.Task != "" {
		log = log.With("task", ref.Task)
	}
	if ref.Hook != nil {
		log = log.With("hook", "on_failure")
	}
	job, err := build(factory, ref.Plugin, ref.Params, log)
	if err != nil {
		return err
	}
	if ref.Hook != nil {
		b.hooks[ref.Hook] = job
	} else {
		b.jobs[ref.Task] = job
	}
	return nil
}

// build calls a plugin's factory, turning a panic into an error: no
// configuration may crash the daemon at load.
func build(factory tasks.Factory, plugin string, params map[string]any, log *slog.Logger) (job tasks.Task, err error) {
	defer func() {
		if r := recover(); r != nil {
			job, err = nil, fmt.Errorf("plugin %q panicked: %v", plugin, r)
		}
	}()
	job, err = factory(params, log)
	if err == nil && job == nil {
		err = fmt.Errorf("plugin %q returned no task", plugin)
	}
	return job, err
}

// CheckStore implements config.Checker: it refuses what the configured
// store cannot do, instead of letting it be quietly ignored. What it can
// do is what its Store type implements: `concurrency = "forbid"|"replace"`
// needs the store's operator controls (lock.Controls), an on_failure hook
// its one-time marker (lock.Oncer).
func (b *builder) CheckStore(cfg *config.Config) error {
	s := store.Zero(cfg)
	_, controls := s.(lock.Controls)
	_, once := s.(lock.Oncer)
	var errs []error
	for i := range cfg.Tasks {
		t := &cfg.Tasks[i]
		if !controls && t.Concurrency != config.ConcurrencyAllow {
			errs = append(errs, fmt.Errorf("task %q: concurrency: %q needs the store's operator controls, which %s does not have (every store of slotd has them); set concurrency = \"allow\" for this task", t.Name, t.Concurrency, storeName(cfg)))
		}
		if !once && t.OnFailure != nil {
			errs = append(errs, fmt.Errorf("task %q: on_failure: hooks need a one-time marker in the store, which %s does not have (every store of slotd has one); set on_failure = false for this task", t.Name, storeName(cfg)))
		}
	}
	return errors.Join(errs...)
}

// storeName is how errors name the configured store: by its section.
func storeName(cfg *config.Config) string {
	switch {
	case cfg.UsesEtcd():
		return "[etcd]"
	case cfg.UsesZooKeeper():
		return "[zookeeper]"
	case cfg.Embedded():
		return "the embedded store"
	}
	return "[redis] " + cfg.RedisMode()
}

// daemon builds the engine's objects of cfg, which Parse has validated
// with b, so that every task and hook has its job.
func (b *builder) daemon(cfg *config.Config) *Daemon {
	d := &Daemon{Config: cfg, Tasks: make([]scheduler.Task, len(cfg.Tasks)), HTTPPool: tasks.HTTPPool(cfg.HTTPPool)}
	hooks := make(map[*config.Hook]*scheduler.Hook)
	for i := range cfg.Tasks {
		t := &cfg.Tasks[i]
		d.Tasks[i] = task(t, b.jobs[t.Name])
		if h := t.OnFailure; h != nil {
			if hooks[h] == nil {
				hooks[h] = &scheduler.Hook{Plugin: h.Plugin, Params: h.Params, Timeout: h.Timeout, Job: b.hooks[h]}
			}
			d.Tasks[i].OnFailure = hooks[h]
		}
	}
	return d
}

// task is t as the engine runs it, with job.
func task(t *config.Task, job tasks.Task) scheduler.Task {
	return scheduler.Task{
		Name:     t.Name,
		Spec:     t.Spec,
		Timezone: t.Timezone,
		Plugin:   t.Plugin,
		Params:   t.Params,

		Policy:       lock.Policy{Lease: t.Lease, DoneTTL: t.DoneTTL, MaxAttempts: t.MaxAttempts},
		Timeout:      t.Timeout,
		Catchup:      catchup(t.Catchup),
		CatchupLimit: t.CatchupLimit,
		Deadline:     t.Deadline,
		Jitter:       t.Jitter,
		OutputTail:   t.OutputTail,
		Paused:       t.Paused,
		Concurrency:  concurrency(t.Concurrency),
		RetryBackoff: retry.Backoff{
			Min: t.RetryBackoff.Initial, Max: t.RetryBackoff.Max,
			Factor: t.RetryBackoff.Multiplier, Spread: t.RetryBackoff.Jitter,
		},

		Schedule: t.Schedule,
		Job:      job,
	}
}

func catchup(c config.Catchup) scheduler.Catchup {
	switch c {
	case config.CatchupLatest:
		return scheduler.CatchupLatest
	case config.CatchupNone:
		return scheduler.CatchupNone
	}
	panic(fmt.Sprintf("assemble: unknown %v", c)) // config returns none other
}

func concurrency(c config.Concurrency) scheduler.Concurrency {
	switch c {
	case config.ConcurrencyAllow:
		return scheduler.ConcurrencyAllow
	case config.ConcurrencyForbid:
		return scheduler.ConcurrencyForbid
	case config.ConcurrencyReplace:
		return scheduler.ConcurrencyReplace
	case config.ConcurrencyQueue:
		return scheduler.ConcurrencyQueue
	}
	panic(fmt.Sprintf("assemble: unknown %v", c)) // config returns none other
}
