// Package cli is slotd's command line: run, validate, status, history,
// rerun, trigger, backfill, pause, resume, reload, healthcheck and version. It is a package rather than part of main so that a
// custom binary — slotd plus plugins of its own — is a three-line main that
// imports its plugins and calls Main (see cmd/slotd-custom).
package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/lmittmann/tint"
	"github.com/mattn/go-isatty"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/internal/assemble"
	"github.com/slotd/slotd/internal/config"
	"github.com/slotd/slotd/internal/observe"
	"github.com/slotd/slotd/internal/store"
	"github.com/slotd/slotd/scheduler"
	"github.com/slotd/slotd/tasks"
)

// Exit codes (SPEC §6).
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// Version is set at build time with -ldflags "-X .../cli.Version=v1.2.3";
// otherwise it comes from the module's build info.
var Version = ""

func version() string {
	if Version != "" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

const usage = `usage: slotd <command> [flags]

commands:
  run       -config FILE                      run the daemon
  validate  -config FILE [-n 3]               check the config; print each task's next slots
  status    -config FILE [-json] [-n 10]      the fleet's recent slots per task, from Redis
  history   -config FILE [-json] [-output] [-n 20] TASK the task's latest attempts, newest first
  rerun     -config FILE [-force] TASK SLOT   clear a slot's done marker and attempts so it
                                              may run again within its window
  trigger   -config FILE [-key KEY] TASK      run TASK now, once, on one replica (asks the daemon)
  backfill  -config FILE TASK FROM TO         run each slot of TASK in [FROM, TO) once, oldest first
                                              (RFC 3339 times or dates; asks the daemon)
  pause     -config FILE TASK                 fire no slot of TASK on any replica until resumed
  resume    -config FILE TASK                 fire TASK's slots again from its next fire time
  reload    -config FILE                      make the running daemon re-read its config
  healthcheck [-url URL] [-timeout 3s]        exit 0 if the daemon's /healthz answers 2xx
  version                                     print the version

exit status: 0 ok, 2 usage or configuration error, 1 otherwise
`

// Option changes how Main runs the daemon; a custom binary passes them.
type Option func(*options)

type options struct {
	redisHooks []redis.Hook
}

// WithRedisHook adds h to the go-redis client of `run` (for example to count
// or trace the daemon's Redis commands); the load tool counts round trips
// with one. The other commands' clients do not get it.
func WithRedisHook(h redis.Hook) Option {
	return func(o *options) { o.redisHooks = append(o.redisHooks, h) }
}

// Main runs the command line and returns the process exit code. SIGTERM and
// SIGINT stop `run` gracefully; SIGHUP reloads its configuration file.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer, opts ...Option) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "run":
		var o options
		for _, opt := range opts {
			opt(&o)
		}
		return cmdRun(ctx, rest, stdout, stderr, o)
	case "validate":
		return cmdValidate(rest, stdout, stderr)
	case "status":
		return cmdStatus(ctx, rest, stdout, stderr)
	case "history":
		return cmdHistory(ctx, rest, stdout, stderr)
	case "rerun":
		return cmdRerun(ctx, rest, stdout, stderr)
	case "trigger":
		return cmdTrigger(ctx, rest, stdout, stderr)
	case "backfill":
		return cmdBackfill(ctx, rest, stdout, stderr)
	case "pause", "resume":
		return cmdPause(ctx, cmd, rest, stdout, stderr)
	case "reload":
		return cmdReload(ctx, rest, stdout, stderr)
	case "healthcheck":
		return cmdHealthcheck(ctx, rest, stdout, stderr)
	case "version", "-version", "--version":
		fmt.Fprintf(stdout, "slotd %s\n", version())
		return exitOK
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "slotd: unknown command %q\n%s", cmd, usage)
		return exitUsage
	}
}

// loadConfig loads and validates the file at path and builds its tasks,
// the plugins with log; on failure it says why on stderr.
func loadConfig(path string, log *slog.Logger, stderr io.Writer) (*assemble.Daemon, bool) {
	d, err := assemble.Load(path, log)
	if err != nil {
		fmt.Fprintf(stderr, "slotd: %v\n", err)
		return nil, false
	}
	return d, true
}

// loadReadOnly is loadConfig for the commands that do not send the write
// endpoints' bearer token: the token is not read (assemble.LoadReadOnly), so
// that reading the fleet needs no access to the write secret.
func loadReadOnly(path string, log *slog.Logger, stderr io.Writer) (*assemble.Daemon, bool) {
	d, err := assemble.LoadReadOnly(path, log)
	if err != nil {
		fmt.Fprintf(stderr, "slotd: %v\n", err)
		return nil, false
	}
	return d, true
}

var discard = slog.New(slog.DiscardHandler)

func cmdValidate(args []string, stdout, stderr io.Writer) int {
	n := 3
	path, _, ok := parseCommand("validate", args, stderr, nil, func(fs *flag.FlagSet) {
		fs.IntVar(&n, "n", 3, "how many fire times to print per task")
	})
	if !ok {
		return exitUsage
	}
	d, ok := loadReadOnly(path, discard, stderr)
	if !ok {
		return exitUsage
	}
	cfg := d.Config
	// The token is checked if this user may read it; one who may not
	// (the secret is the daemon's) still validates the rest.
	if _, key, err := cfg.ReadToken(); errors.Is(err, config.ErrTokenUnreadable) {
		fmt.Fprintf(stderr, "slotd validate: warning: %s: http.%s: %v; not checked (slotd run needs it)\n", cfg.Source, key, err)
	} else if err != nil {
		fmt.Fprintf(stderr, "slotd: %s: http.%s: %v\n", cfg.Source, key, err)
		return exitUsage
	}
	now := time.Now()
	for i := range d.Tasks {
		t := &d.Tasks[i]
		tz := t.Timezone
		if tz == "" {
			tz = "UTC"
		}
		fmt.Fprintf(stdout, "task %s: schedule %q (%s), plugin %s, slot ids by %s, window %s\n",
			t.Name, t.Spec, tz, t.Plugin, t.Schedule.Resolution(), t.Window())
		printTiming(stdout, t)
		at := now
		for range n {
			if at = t.Schedule.Next(at); at.IsZero() {
				break
			}
			fmt.Fprintf(stdout, "  %s  slot %s  deadline %s%s\n", at.UTC().Format(time.RFC3339),
				t.Schedule.SlotID(at), t.SlotDeadline(at).UTC().Format(time.RFC3339), startNote(t, at))
		}
		if at.IsZero() {
			fmt.Fprintf(stdout, "  no more fire times\n")
		}
	}
	store := "embedded in-memory store (one replica)"
	if !cfg.Embedded() {
		store = "redis (" + cfg.RedisMode() + ")"
	}
	if cfg.UsesZooKeeper() {
		store = fmt.Sprintf("zookeeper (%d servers)", len(cfg.ZooKeeper.Servers))
	}
	if cfg.UsesEtcd() {
		store = fmt.Sprintf("etcd (%d endpoints)", len(cfg.Etcd.Endpoints))
	}
	capacity := ""
	if cfg.MaxRunning > 0 {
		capacity = fmt.Sprintf(", max_running %d", cfg.MaxRunning)
	}
	fmt.Fprintf(stdout, "config ok: %d tasks, %s, replica %s%s\n", len(cfg.Tasks), store, cfg.Replica, capacity)
	return exitOK
}

func cmdRun(ctx context.Context, args []string, stdout, stderr io.Writer, o options) int {
	path, _, ok := parseCommand("run", args, stderr, nil, nil)
	if !ok {
		return exitUsage
	}
	// The file is read once, and the plugins are built as it is read,
	// before its [log] settings are known: they get a logger whose handler
	// is chosen once the file is loaded.
	late := newLateHandler()
	d, ok := loadConfig(path, slog.New(late), stderr)
	if !ok {
		return exitUsage
	}
	cfg := d.Config
	level := new(slog.LevelVar) // a reload may change it
	level.Set(cfg.LogLevel)
	base := newLogger(stderr, level, cfg.LogFormat)
	log := base.With("replica", cfg.Replica)
	late.set(log.Handler())
	// What the daemon read for itself (the Redis URL with its password,
	// the API's bearer token, and whatever the operator lists) is no exec
	// task's business.
	tasks.DropEnv(cfg.URLEnv, cfg.TokenEnv)
	tasks.DropEnv(cfg.EnvDrop...)
	if err := tasks.SetHTTPPool(d.HTTPPool); err != nil { // validated at load; not expected
		log.Error("slotd failed", "err", err)
		return exitUsage
	}
	redis.SetLogger(redisLogger{log.With("component", "redis")})
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// SIGHUP is taken from here on, so that it cannot kill the daemon while
	// it starts; a reload waits for the scheduler.
	hup, stopHangups := hangups()
	defer stopHangups()
	if err := run(ctx, d, base, o, hup, level); err != nil {
		log.Error("slotd failed", "err", err)
		return exitError
	}
	return exitOK
}

// run is the daemon: store, metrics, HTTP, scheduler; torn down in reverse.
// log is not yet scoped to the replica: the scheduler adds that itself.
// Each SIGHUP from hup (nil: none) reloads the configuration (reloader),
// which sets level (nil: fixed) to the file's [log] level.
func run(ctx context.Context, d *assemble.Daemon, log *slog.Logger, o options, hup <-chan os.Signal, level *slog.LevelVar) error {
	cfg := d.Config
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "slotd_build_info",
		Help:        "Always 1; the labels say which slotd runs.",
		ConstLabels: prometheus.Labels{"version": version()},
	}, func() float64 { return 1 }))

	opts := []store.Option{store.WithSubscribe()}
	for _, h := range o.redisHooks {
		opts = append(opts, store.WithRedisHook(h))
	}
	b, err := store.Open(ctx, cfg, log, opts...)
	if err != nil {
		return err
	}
	defer b.Close()
	policies := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "slotd_redis_maxmemory_policy",
		Help: "Redis servers by maxmemory-policy as read at start (unknown: CONFIG GET refused); any but noeviction may evict slot state.",
	}, []string{"policy"})
	for _, e := range b.CheckEviction(ctx, log) {
		policy := e.Policy
		if policy == "" {
			policy = "unknown"
		}
		policies.WithLabelValues(policy).Inc()
	}
	reg.MustRegister(policies)

	sched := scheduler.New(d.Tasks, b.Store, scheduler.WithLogger(log),
		scheduler.WithHistory(b.History), scheduler.WithReplica(cfg.Replica),
		scheduler.WithShutdownGrace(cfg.ShutdownGrace), scheduler.WithMaxClockSkew(cfg.MaxClockSkew),
		scheduler.WithMaxRunning(cfg.MaxRunning),
		scheduler.WithMaxHooks(cfg.MaxHooks))
	// reloads.Reload is the daemon's one reload: SIGHUP's here, and the
	// HTTP API's POST /api/v1/reload (slotd reload).
	reloads := newReloader(d, sched, log.With("replica", cfg.Replica), level, reg)
	defer reloads.onHangup(hup)()

	if cfg.Listen != "off" {
		ln, err := net.Listen("tcp", cfg.Listen)
		if err != nil {
			return fmt.Errorf("http listen: %w", err)
		}
		scheme := "http"
		if cfg.HTTPTLS != nil {
			// Under observe.Serve's connection limit, so that a
			// handshake counts as a connection like any other.
			ln, scheme = tls.NewListener(ln, cfg.HTTPTLS), "https"
		}
		srv := observe.NewServer(observe.CheckHost(observe.Handler(observe.Daemon{
			Scheduler: sched, Gatherer: reg, Store: b.Store, History: b.History,
			Replica: cfg.Replica, MaxClockSkew: cfg.MaxClockSkew, Token: cfg.Token,
			Reload: reloads.Reload,
		}), cfg.Listen, cfg.AllowedHosts))
		served := make(chan struct{})
		go func() {
			defer close(served)
			if err := observe.Serve(srv, ln, 0); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("http server", "err", err)
			}
		}()
		log.Info("http listening", "addr", ln.Addr().String(), "scheme", scheme)
		defer func() {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
			<-served
		}()
	}
	log.Info("slotd starting", "version", version(), "replica", cfg.Replica, "tasks", len(cfg.Tasks),
		"plugins", tasks.Plugins())
	return sched.Run(ctx)
}

// newLogger returns tint on a terminal and JSON otherwise, unless format
// says which. tint colours only a terminal, and only when NO_COLOR is
// unset (no-color.org). Every format escapes control characters in what
// it writes (escapeAttr): a task's output cannot drive a terminal or forge
// a log line.
func newLogger(w io.Writer, level slog.Leveler, format string) *slog.Logger {
	tty := isTerminal(w)
	if format == "auto" || format == "" {
		format = "json"
		if tty {
			format = "text"
		}
	}
	if format == "json" {
		escape := escapeAttr(true)
		return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level,
			ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr { return escape(groups, durationString(groups, a)) }}))
	}
	return slog.New(tint.NewHandler(w, &tint.Options{Level: level, TimeFormat: time.TimeOnly,
		NoColor: !tty || os.Getenv("NO_COLOR") != "", ReplaceAttr: escapeAttr(false)}))
}

// isTerminal reports whether w is a terminal (not merely a character
// device: /dev/null is one too).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && isatty.IsTerminal(f.Fd())
}

// redisLogger sends go-redis's own messages (reconnects, pool errors) through
// slog, so that a JSON log stays JSON.
type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.WarnContext(ctx, fmt.Sprintf(format, v...))
}

// durationString writes durations as "1.5s" rather than nanoseconds.
func durationString(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}
