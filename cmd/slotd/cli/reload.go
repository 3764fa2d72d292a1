package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"reflect"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slotd/slotd/internal/assemble"
	"github.com/slotd/slotd/internal/config"
	"github.com/slotd/slotd/internal/observe"
	"github.com/slotd/slotd/scheduler"
	"github.com/slotd/slotd/tasks"
)

// reloadTimeout bounds a reload started by SIGHUP: reading the file, and
// waiting for the engine's loop to take the tasks.
const reloadTimeout = 30 * time.Second

// errNoTasks refuses a reload that would remove every task: a file
// emptied or half-written (a reload during `cat > slotd.toml`) reads as a
// valid configuration of no task, and applying it would stop the fleet's
// schedule, and its per-task metrics and alerts, without a word. A daemon
// meant to run nothing is restarted with such a file.
var errNoTasks = errors.New("the file has no [[task]]: a reload never removes every task (an empty or half-written file?); restart the daemon to run none")

// reloader re-reads a running daemon's configuration file and applies
// what can change at runtime — its tasks, the log level and the http
// plugin's connection pool. What cannot (see restartKeys) is compared with
// the configuration the process started with, and reported as needing a
// restart.
type reloader struct {
	started *config.Config
	sched   *scheduler.Scheduler
	log     *slog.Logger
	level   *slog.LevelVar // the daemon's log level; nil: fixed
	pool    tasks.HTTPPool // the http plugin's pool as last set

	mu sync.Mutex // one reload at a time, whoever asks

	failures, successes prometheus.Counter
	lastSuccess         prometheus.Gauge
	restartNeeded       prometheus.Gauge
}

// newReloader returns the reloader of the daemon that started with cfg,
// its metrics registered with reg.
func newReloader(d *assemble.Daemon, sched *scheduler.Scheduler, log *slog.Logger, level *slog.LevelVar, reg prometheus.Registerer) *reloader {
	r := &reloader{
		started: d.Config,
		sched:   sched,
		log:     log,
		level:   level,
		pool:    d.HTTPPool,
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "slotd_config_reload_failures_total",
			Help: "Reloads (SIGHUP, slotd reload, POST /api/v1/reload) that changed nothing: the file was invalid or unreadable, or the engine did not take its tasks (it was stopping, or the request ended first); the running configuration stayed.",
		}),
		successes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "slotd_config_reloads_total",
			Help: "Reloads whose file was valid and whose tasks were applied.",
		}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "slotd_config_last_reload_success_timestamp_seconds",
			Help: "When the configuration was last loaded successfully, at start or by a reload (Unix seconds).",
		}),
		restartNeeded: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "slotd_config_restart_needed",
			Help: "1 when the last reload's file changes settings that apply only at a restart (store, listen address, replica id, log format, daemon settings).",
		}),
	}
	r.lastSuccess.SetToCurrentTime()
	reg.MustRegister(r.failures, r.successes, r.lastSuccess, r.restartNeeded)
	return r
}

// Reload reads and validates the configuration file again. If it is
// invalid (or cannot be read), nothing changes: the error, which names the
// key and the task, is logged, counted and returned wrapping
// observe.ErrInvalidConfig. So is a file with no task while tasks run
// (errNoTasks), and one that changed while it was read (config.Load).
// If it is valid, its tasks replace the
// running ones (see scheduler.Reload: added tasks start at their next
// fire time, removed ones claim nothing more, changed ones apply from
// their next slot, running attempts go on), its [log] level and
// [plugins.http] pool apply, and the settings that apply only at a restart and differ from the running
// ones are logged as such, keeping their running values. It is what SIGHUP does, and what the HTTP
// API's reload calls.
func (r *reloader) Reload(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	path := r.started.Source
	d, err := assemble.Load(path, r.log)
	if err == nil && len(d.Config.Tasks) == 0 && len(r.sched.Tasks()) > 0 {
		err = errNoTasks
	}
	if err != nil {
		r.failures.Inc()
		r.log.Error("configuration reload failed: the running configuration stays", "config", path, "err", err)
		return fmt.Errorf("%w: %w", observe.ErrInvalidConfig, err)
	}
	cfg := d.Config
	change, err := r.sched.Reload(ctx, d.Tasks)
	if err != nil {
		r.failures.Inc()
		r.log.Error("configuration reload failed: the tasks were not replaced", "config", path, "err", err)
		return fmt.Errorf("reload %s: %w", path, err)
	}
	r.successes.Inc()
	r.lastSuccess.SetToCurrentTime()
	var applied []string
	if r.level != nil {
		applied = append(applied, "LogLevel")
		if was := r.level.Level(); was != cfg.LogLevel {
			r.level.Set(cfg.LogLevel)
			r.log.Warn("log level changed", "from", was, "to", cfg.LogLevel)
		}
	}
	applied = append(applied, "HTTPPool")
	if d.HTTPPool != r.pool {
		if err := tasks.SetHTTPPool(d.HTTPPool); err != nil { // validated at load; not expected
			r.log.Error("the http plugin's connection pool was not changed", "err", err)
		} else {
			r.pool = d.HTTPPool
			r.log.Info("the http plugin's connection pool changed: requests in flight finish on their connections")
		}
	}
	restart := restartKeys(r.started, cfg, applied...)
	r.restartNeeded.Set(0)
	r.log.Info("configuration reloaded", "config", path, "tasks", len(cfg.Tasks),
		"added", change.Added, "removed", change.Removed, "changed", change.Changed)
	if len(change.Removed) > 0 {
		r.log.Warn("tasks removed by the reload: this replica claims none of their slots from now on",
			"config", path, "removed", change.Removed)
	}
	if len(restart) > 0 {
		r.restartNeeded.Set(1)
		r.log.Warn("configuration reloaded, but these settings apply only at a restart: they keep their running values until then",
			"config", path, "restart_needed", restart)
	}
	return nil
}

// configKeys names, for each field of config.Config that applies only at
// a restart, its key in the file. A field not listed here (one added
// later) is named by its Go name: it is reported, never silently ignored.
var configKeys = map[string]string{
	"Replica":       "daemon.replica",
	"ShutdownGrace": "daemon.shutdown_grace",
	"MaxClockSkew":  "daemon.max_clock_skew",
	"EnvDrop":       "daemon.env_drop",
	"MaxRunning":    "daemon.max_running",
	"MaxHooks":      "daemon.max_hooks",
	"RedisURL":      "redis.url",
	"URLEnv":        "redis.url_env",
	"Prefix":        "redis.prefix",
	"Redis":         "redis (servers, mode, credentials, TLS, min_replicas_ack)",
	"Listen":        "http.listen",
	"Token":         "http token (the contents of token_file or token_env)",
	"TokenFile":     "http.token_file",
	"TokenEnv":      "http.token_env",
	"AllowedHosts":  "http.allowed_hosts",
	"HTTPTLS":       "http TLS (tls_cert_file, tls_key_file and their contents)",
	"LogLevel":      "log.level",
	"LogFormat":     "log.format",
}

// restartKeys lists the keys whose values differ between running and
// loaded, of every setting but the tasks, the file's path and the fields
// applied at runtime (config.Config field names): the store and its
// topology, the HTTP listener, the replica id, the log format and the
// daemon's settings are read once, at start. Values are not quoted: a URL
// may hold a password.
func restartKeys(running, loaded *config.Config, applied ...string) []string {
	var keys []string
	a, b := reflect.ValueOf(running).Elem(), reflect.ValueOf(loaded).Elem()
	for i := range a.NumField() {
		name := a.Type().Field(i).Name
		if name == "Tasks" || name == "Source" || slices.Contains(applied, name) {
			continue
		}
		if reflect.DeepEqual(a.Field(i).Interface(), b.Field(i).Interface()) {
			continue
		}
		key, ok := configKeys[name]
		if !ok {
			key = name
		}
		keys = append(keys, key)
	}
	return keys
}

// hangups starts taking SIGHUP, so that it no longer kills the process
// (exit 129, without the shutdown, leaving running slots held until their
// leases ran out); each one is queued (at most one waits) for onHangup.
// Started with SIGHUP ignored (nohup), it leaves it so and returns a nil
// channel: tasks inherit that as before, and reload is the API's only.
// Tasks still get the default SIGHUP action. stop stops the queueing.
func hangups() (hup chan os.Signal, stop func()) {
	if signal.Ignored(syscall.SIGHUP) {
		return nil, func() {}
	}
	hup = make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	return hup, func() { signal.Stop(hup) }
}

// onHangup reloads on each SIGHUP from hup (nil: none) until the returned
// func is called, which waits for a reload under way to end.
func (r *reloader) onHangup(hup <-chan os.Signal) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-hup:
				r.log.Info("SIGHUP: reloading the configuration", "config", r.started.Source)
				ctx, cancel := context.WithTimeout(context.Background(), reloadTimeout)
				err := r.Reload(ctx)
				cancel()
				if errors.Is(err, scheduler.ErrStopped) {
					return
				}
			case <-quit:
				return
			}
		}
	}()
	return func() {
		close(quit)
		<-done
	}
}
