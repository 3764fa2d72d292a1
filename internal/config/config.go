package config

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/BurntSushi/toml"
)

// Defaults and bounds of the configuration. Those that are also the
// engine's (the daemon's options, the attempt cap, the output tail, the
// http pool) equal its own; internal/assemble's tests hold them equal.
const (
	DefaultPrefix    = "slotd"
	DefaultListen    = "127.0.0.1:9464"
	DefaultLogFormat = "auto"

	DefaultShutdownGrace = 30 * time.Second // [daemon] shutdown_grace
	DefaultMaxClockSkew  = time.Second      // [daemon] max_clock_skew
	DefaultMaxHooks      = 8                // [daemon] max_hooks

	DefaultLease = 15 * time.Second
	// DefaultDoneTTL is done_ttl where no key sets it, cut for a dense
	// schedule to the span of its last DefaultDoneMarkers slots, and
	// never under the slot window (defaultDoneTTL).
	DefaultDoneTTL     = 48 * time.Hour
	DefaultDoneMarkers = 10_000
	DefaultMaxAttempts = 3
	DefaultTimeout     = time.Hour
	DefaultCatchup     = CatchupLatest
	// DefaultCatchupLimit bounds catch-up at start-up to slots at most
	// this old: a window of up to a day (hourly, daily tasks) is caught up
	// whole; a weekly, yearly or leap-day task's slot from long ago is not.
	DefaultCatchupLimit = 24 * time.Hour
	// DefaultOutputTail is how many bytes of each attempt's output (its
	// tail) the history keeps.
	DefaultOutputTail = 4 << 10
	// MaxOutputTail bounds output_tail.
	MaxOutputTail = 64 << 10

	// MinLease is the shortest lease: it is renewed every lease/3, and a
	// renewal must fit a Redis round trip with room to spare.
	MinLease = time.Second
	// MinDeadline is the shortest slot window a deadline may set.
	MinDeadline = time.Second
	// MaxAttemptsLimit bounds max_attempts: the fencing token is
	// slot_unix_seconds*1000 + attempt, so attempts must stay below 1000.
	MaxAttemptsLimit = 999

	// The http plugin's connection pool, [plugins.http].
	DefaultHTTPMaxIdlePerHost = 256
	DefaultHTTPIdleTimeout    = 90 * time.Second
	MaxHTTPMaxIdlePerHost     = 10000 // each idle connection holds a file descriptor
)

// HTTPPool is [plugins.http]: the http plugin's connection pool, one per
// process (see tasks.HTTPPool).
type HTTPPool struct {
	MaxIdlePerHost  int           // max_idle_per_host: 1 to MaxHTTPMaxIdlePerHost
	IdleTimeout     time.Duration // idle_timeout: positive
	MaxConnsPerHost int           // max_conns_per_host: 0 (no bound) to MaxHTTPMaxIdlePerHost
}

// DefaultHTTPPool is the pool when [plugins.http] sets nothing.
var DefaultHTTPPool = HTTPPool{MaxIdlePerHost: DefaultHTTPMaxIdlePerHost, IdleTimeout: DefaultHTTPIdleTimeout,
	MaxConnsPerHost: DefaultHTTPMaxIdlePerHost}

// Config is a validated slotd configuration: data, read-only after load.
// internal/assemble builds the engine's objects from it.
type Config struct {
	Source        string           // where it was loaded from (the file path)
	Replica       string           // [daemon] replica; default "<hostname>-<pid>"
	ShutdownGrace time.Duration    // [daemon] shutdown_grace; default 30s
	MaxClockSkew  time.Duration    // [daemon] max_clock_skew; default 1s: readiness fails and a warning is logged beyond it
	EnvDrop       []string         // [daemon] env_drop: variables exec tasks must not inherit
	MaxRunning    int              // [daemon] max_running: attempts this replica runs at once; 0: no cap
	MaxHooks      int              // [daemon] max_hooks: on_failure hooks run at once per replica; default 8
	RedisURL      string           // [redis] url; "" = embedded in-memory store (one replica)
	URLEnv        string           // [redis] url_env: the variable the URL came from; exec tasks do not inherit it
	Prefix        string           // [redis] prefix; default "slotd"
	Redis         RedisOptions     // [redis] Sentinel or Cluster servers, credentials, min_replicas_ack
	ZooKeeper     ZooKeeperOptions // [zookeeper] servers, session timeout, root, digest auth
	Etcd          EtcdOptions      // [etcd] endpoints, credentials, TLS
	Listen        string           // [http] listen; default "127.0.0.1:9464"; "off" disables the HTTP server
	// Token is the bearer token of the write endpoints, read from [http]
	// token_file or token_env at load; "" disables them. Never logged.
	Token     string     `json:"-"`
	TokenFile string     // [http] token_file, the path
	TokenEnv  string     // [http] token_env, the variable's name; exec tasks do not inherit it
	LogLevel  slog.Level // [log] level: debug|info|warn|error; default info
	LogFormat string     // [log] format: auto|text|json; default auto
	HTTPPool  HTTPPool   // [plugins.http]: the http plugin's connection pool, one per process
	Tasks     []Task     // [[task]], in file order

	// AllowedHosts are the Host names the HTTP server answers besides
	// loopback names, IP literals and the listen host ([http]
	// allowed_hosts, lower case; "*.example.com" matches subdomains).
	AllowedHosts []string
	// HTTPTLS is TLS on the listener ([http] tls_cert_file and
	// tls_key_file, read at load); nil: plain HTTP.
	HTTPTLS *tls.Config
}

// The keys of each table, for unknown-key errors.
var (
	topKeys      = []string{"daemon", "redis", "http", "log", "plugins", "defaults", "task", "zookeeper", "etcd"}
	daemonKeys   = []string{"replica", "shutdown_grace", "max_clock_skew", "env_drop", "max_running", "max_hooks"}
	redisKeys    = append([]string{"url", "prefix", "url_env"}, redisModeKeys...)
	httpKeys     = []string{"listen", "token_file", "token_env", "allowed_hosts", "tls_cert_file", "tls_key_file"}
	logKeys      = []string{"level", "format"}
	pluginsKeys  = []string{"http"}
	httpPoolKeys = []string{"max_idle_per_host", "idle_timeout", "max_conns_per_host"}
	policyKeys   = []string{"lease", "done_ttl", "max_attempts", "timeout", "catchup", "deadline", "catchup_limit", "output_tail", "concurrency", "retry_backoff"}
	taskOwnKeys  = []string{"name", "schedule", "schedules", "active_from", "active_until", "jitter", "timezone", "plugin", "params", "paused", "on_failure"}
	defaultKeys  = append(append([]string{}, policyKeys...), "on_failure")
	taskKeys     = append(append([]string{}, taskOwnKeys...), policyKeys...)
)

var logLevels = map[string]slog.Level{
	"debug": slog.LevelDebug,
	"info":  slog.LevelInfo,
	"warn":  slog.LevelWarn,
	"error": slog.LevelError,
}

// Load reads the configuration file at path, once — a regular file, at
// most MaxFileSize bytes, within FileReadTimeout, unchanged while it was
// read (readFile) — and validates it as Parse does. Every problem in the
// file is reported, each prefixed with the path.
func Load(path string, log *slog.Logger, check Checker) (*Config, error) {
	return load(path, log, check, false)
}

// LoadReadOnly is Load for the commands that only read the fleet (status,
// history, rerun, validate): it checks the [http] token keys but does not
// read the token, so that an operator who may read the fleet needs no
// access to the write endpoints' secret. Its Config's Token is "";
// Config.ReadToken reads it on demand.
func LoadReadOnly(path string, log *slog.Logger, check Checker) (*Config, error) {
	return load(path, log, check, true)
}

func load(path string, log *slog.Logger, check Checker, readOnly bool) (*Config, error) {
	data, _, err := readFile(path, MaxFileSize)
	if err != nil {
		return nil, fmt.Errorf("load config: %w", err)
	}
	return parseConfig(data, path, log, check, readOnly)
}

// Parse parses and validates a TOML configuration; source names it in
// errors, and log (which may be nil) gets a warning if it has no task.
// What config cannot know by itself — the plugins and their params, what
// the configured store supports — check checks (nil: not checked), and its
// errors are reported with the file's own, in file order. The error, if
// any, joins one error per problem found (errors.Join), so that an
// operator can fix the file in one go. A file past MaxFileSize, MaxDepth or
// MaxKeys is rejected before it is decoded.
func Parse(data []byte, source string, log *slog.Logger, check Checker) (*Config, error) {
	return parseConfig(data, source, log, check, false)
}

func parseConfig(data []byte, source string, log *slog.Logger, check Checker, readOnly bool) (*Config, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &problems{source: source, check: check}
	if err := checkBounds(data); err != nil {
		p.add(err)
		return nil, p.err()
	}

	// Decode into plain maps rather than structs: a struct decode stops at
	// the first type mismatch, and BurntSushi/toml matches struct fields
	// case-insensitively, which would let "Lease" pass for "lease". Walking
	// the maps reports every mismatch and every unknown key, exactly.
	var root map[string]any
	if _, err := toml.Decode(string(data), &root); err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			p.add(fmt.Errorf("line %d: %s", pe.Position.Line, pe.Message))
		} else {
			p.add(err)
		}
		return nil, p.err()
	}

	top := table{m: root, p: p}
	top.checkKeys(topKeys)
	cfg := &Config{
		Source:        source,
		ShutdownGrace: DefaultShutdownGrace,
		MaxClockSkew:  DefaultMaxClockSkew,
		MaxHooks:      DefaultMaxHooks,
		Prefix:        DefaultPrefix,
		Listen:        DefaultListen,
		LogLevel:      slog.LevelInfo,
		LogFormat:     DefaultLogFormat,
		HTTPPool:      DefaultHTTPPool,
	}
	cfg.readDaemon(top.sub("daemon", daemonKeys))
	cfg.readRedis(top.sub("redis", redisKeys))
	cfg.readEtcd(top.sub("etcd", etcdKeys))
	cfg.readHTTP(top.sub("http", httpKeys), readOnly)
	cfg.readLog(top.sub("log", logKeys))
	cfg.readHTTPPool(top.sub("plugins", pluginsKeys).sub("http", httpPoolKeys))
	defTable := top.sub("defaults", defaultKeys)
	defaults := readPolicy(defTable)
	defaultHook := readHook(defTable, "defaults.on_failure", "")
	cfg.readTasks(top, defaults, defaultHook)
	cfg.readZooKeeper(top.sub("zookeeper", zookeeperKeys))
	if check != nil {
		// With the valid tasks, once the store's sections are read.
		for _, err := range splitJoined(check.CheckStore(cfg)) {
			if err != nil {
				p.add(err)
			}
		}
	}

	if err := p.err(); err != nil {
		return nil, err
	}
	if len(cfg.Tasks) == 0 {
		log.Warn("no [[task]] in the configuration: nothing will run", "config", source)
	}
	return cfg, nil
}

func (c *Config) readDaemon(t table) {
	if v, ok := t.str("replica"); ok && v != "" {
		switch {
		case len(v) > 128:
			t.errorf("replica", "longer than 128 bytes")
		case strings.IndexFunc(v, badNameRune) >= 0:
			t.errorf("replica", "%q contains whitespace or a control character", v)
		default:
			c.Replica = v
		}
	}
	if c.Replica == "" {
		c.Replica = DefaultReplica()
	}
	if d, ok := t.positive("shutdown_grace"); ok {
		c.ShutdownGrace = d
	}
	if d, ok := t.positive("max_clock_skew"); ok {
		c.MaxClockSkew = d
	}
	if o := t.integer("max_hooks", 1, 10000, "on_failure hooks run at once per replica"); o.set && !o.bad {
		c.MaxHooks = o.v
	}
	c.readEnvDrop(t)
	c.readMaxRunning(t)
}

// readEnvDrop reads [daemon] env_drop: names of variables the daemon holds
// for itself (secrets), which exec tasks must not inherit.
func (c *Config) readEnvDrop(t table) {
	v, ok := t.m["env_drop"]
	if !ok {
		return
	}
	list, ok := v.([]any)
	if !ok {
		t.errorf("env_drop", "must be an array of environment variable names, not %s", tomlType(v))
		return
	}
	for i, e := range list {
		name, ok := e.(string)
		if !ok || !envNameRE.MatchString(name) {
			t.errorf("env_drop", "item %d (%v) is not an environment variable name (want [A-Za-z_][A-Za-z0-9_]*)", i+1, e)
			continue
		}
		c.EnvDrop = append(c.EnvDrop, name)
	}
}

func badNameRune(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }

// DefaultReplica is the replica id when none is configured:
// "<hostname>-<pid>", unique per process on a fleet, at most 128 bytes (as
// the engine's own default, scheduler.DefaultReplica).
func DefaultReplica() string {
	host, err := os.Hostname()
	if err != nil || host == "" || strings.IndexFunc(host, badNameRune) >= 0 {
		host = "slotd"
	}
	pid := "-" + strconv.Itoa(os.Getpid())
	if len(host)+len(pid) > 128 {
		host = host[:128-len(pid)]
	}
	return host + pid
}

func (c *Config) readHTTP(t table, readOnly bool) {
	c.readToken(t, readOnly)
	c.readHTTPServer(t)
	v, ok := t.str("listen")
	if !ok {
		return
	}
	if v != "off" {
		_, port, err := net.SplitHostPort(v)
		if err != nil {
			t.errorf("listen", "%q: want host:port (such as \"127.0.0.1:9464\" or \":9464\") or \"off\"", v)
			return
		}
		if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			t.errorf("listen", "%q: port must be a number from 0 to 65535", v)
			return
		}
	}
	c.Listen = v
}

func (c *Config) readLog(t table) {
	if v, ok := t.str("level"); ok {
		if l, known := logLevels[strings.ToLower(v)]; known {
			c.LogLevel = l
		} else {
			t.errorf("level", "%q: want debug, info, warn or error", v)
		}
	}
	if v, ok := t.str("format"); ok {
		switch f := strings.ToLower(v); f {
		case "auto", "text", "json":
			c.LogFormat = f
		default:
			t.errorf("format", "%q: want auto, text or json", v)
		}
	}
}

// readHTTPPool reads [plugins.http]: the pool of connections every http
// task of the process shares.
func (c *Config) readHTTPPool(t table) {
	if o := t.integer("max_idle_per_host", 1, MaxHTTPMaxIdlePerHost,
		"idle connections kept per host; each holds a file descriptor"); o.set && !o.bad {
		c.HTTPPool.MaxIdlePerHost = o.v
	}
	if d, ok := t.positive("idle_timeout"); ok {
		c.HTTPPool.IdleTimeout = d
	}
	// Unset, the bound follows the idle pool: no connection is opened that
	// the pool could not keep.
	c.HTTPPool.MaxConnsPerHost = c.HTTPPool.MaxIdlePerHost
	if o := t.integer("max_conns_per_host", 0, MaxHTTPMaxIdlePerHost,
		"connections open to one host at once; 0: no bound"); o.set && !o.bad {
		c.HTTPPool.MaxConnsPerHost = o.v
	}
}
