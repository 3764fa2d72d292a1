package scheduler

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/BurntSushi/toml"
	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/tasks"
)

// Defaults of the configuration.
const (
	DefaultShutdownGrace = 30 * time.Second
	DefaultMaxClockSkew  = time.Second
	DefaultPrefix        = "slotd"
	DefaultListen        = "127.0.0.1:9464"
	DefaultLogFormat     = "auto"

	DefaultLease       = 15 * time.Second
	DefaultMinDoneTTL  = 48 * time.Hour // done_ttl is at least this, and at least the slot window
	DefaultMaxAttempts = 3
	DefaultTimeout     = time.Hour
	DefaultCatchup     = CatchupLatest

	// MinLease is the shortest lease: it is renewed every lease/3, and a
	// renewal must fit a Redis round trip with room to spare.
	MinLease = time.Second
	// MaxAttemptsLimit bounds max_attempts: the fencing token is
	// slot_unix_seconds*1000 + attempt, so attempts must stay below 1000.
	MaxAttemptsLimit = lock.MaxAttempts
)

// Catch-up policies: what a replica does on start-up with a slot whose
// window is still open.
const (
	CatchupLatest = "latest" // claim the latest slot if its window is still open
	CatchupNone   = "none"   // wait for the next fire time
)

// Config is a validated slotd configuration. It is read-only after load.
type Config struct {
	Source        string        // where it was loaded from (the file path)
	Replica       string        // [daemon] replica; default "<hostname>-<pid>"
	ShutdownGrace time.Duration // [daemon] shutdown_grace; default 30s
	MaxClockSkew  time.Duration // [daemon] max_clock_skew; default 1s: readiness fails and a warning is logged beyond it
	RedisURL      string        // [redis] url; "" = embedded in-memory store (one replica)
	Prefix        string        // [redis] prefix; default "slotd"
	Redis         RedisOptions  // [redis] Sentinel or Cluster servers, credentials, min_replicas_ack
	Listen        string        // [http] listen; default "127.0.0.1:9464"; "off" disables the HTTP server
	LogLevel      slog.Level    // [log] level: debug|info|warn|error; default info
	LogFormat     string        // [log] format: auto|text|json; default auto
	Tasks         []Task        // [[task]], in file order
}

// Policy is how the slots of one task are claimed and run: [defaults],
// overridden key by key in each [[task]].
type Policy struct {
	Lease       time.Duration // default 15s; >= 1s (renewed every lease/3, so shorter cannot renew reliably)
	DoneTTL     time.Duration // default: max(48h, the task's window); if set explicitly (in [defaults] or the task) it must be >= the window
	MaxAttempts int           // default 3; 1..999 (the fencing token is slot_unix_seconds*1000 + attempt)
	Timeout     time.Duration // default 1h; > 0
	Catchup     string        // "latest" (default) or "none"
	Deadline    time.Duration // 0 (default) = the slot window ends at the next fire time; else slot time + Deadline; must be > 0 if set and <= DoneTTL
}

// Task is one configured [[task]].
type Task struct {
	Name     string
	Spec     string         // the schedule key as written
	Timezone string         // as written; "" is UTC
	Plugin   string         // the registered plugin name
	Params   map[string]any // [task.params]; never nil
	Policy
	Schedule *Schedule
	Job      tasks.Task // built by the plugin's factory at load
}

// Window returns how long after its fire time a slot may still start: the
// deadline if set, else the schedule's longest gap between fire times.
func (t *Task) Window() time.Duration {
	if t.Deadline > 0 {
		return t.Deadline
	}
	return t.Schedule.MaxGap()
}

// SlotDeadline returns the end of the window of the slot that fires at slot:
// slot+Deadline if set, else the next fire time.
func (t *Task) SlotDeadline(slot time.Time) time.Time {
	if t.Deadline > 0 {
		return slot.Add(t.Deadline).UTC()
	}
	return t.Schedule.Next(slot)
}

// taskNameRE is what a task name may look like: it is written inside the
// hash-tag braces of Redis keys ("slotd:{<task>:<slot id>}"), so no braces,
// colons or spaces.
var taskNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// The keys of each table, for unknown-key errors.
var (
	topKeys     = []string{"daemon", "redis", "http", "log", "defaults", "task"}
	daemonKeys  = []string{"replica", "shutdown_grace", "max_clock_skew"}
	redisKeys   = append([]string{"url", "prefix", "url_env"}, redisModeKeys...)
	httpKeys    = []string{"listen"}
	logKeys     = []string{"level", "format"}
	policyKeys  = []string{"lease", "done_ttl", "max_attempts", "timeout", "catchup", "deadline"}
	taskOwnKeys = []string{"name", "schedule", "timezone", "plugin", "params"}
	taskKeys    = append(append([]string{}, taskOwnKeys...), policyKeys...)
)

var logLevels = map[string]slog.Level{
	"debug": slog.LevelDebug,
	"info":  slog.LevelInfo,
	"warn":  slog.LevelWarn,
	"error": slog.LevelError,
}

// LoadConfig reads and validates the configuration file at path. Every
// problem in the file is reported, each prefixed with the path.
func LoadConfig(path string, log *slog.Logger) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load config: %w", err)
	}
	return ParseConfig(data, path, log)
}

// ParseConfig parses and validates a TOML configuration; source names it in
// errors. It builds every task with its plugin's factory, giving each a
// logger scoped with the task's name (log may be nil). The error, if any,
// joins one error per problem found (errors.Join), so that an operator can
// fix the file in one go.
func ParseConfig(data []byte, source string, log *slog.Logger) (*Config, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &problems{source: source}

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
		Prefix:        DefaultPrefix,
		Listen:        DefaultListen,
		LogLevel:      slog.LevelInfo,
		LogFormat:     DefaultLogFormat,
	}
	cfg.readDaemon(top.sub("daemon", daemonKeys))
	cfg.readRedis(top.sub("redis", redisKeys))
	cfg.readHTTP(top.sub("http", httpKeys))
	cfg.readLog(top.sub("log", logKeys))
	defaults := readPolicy(top.sub("defaults", policyKeys))
	cfg.readTasks(top, defaults, log)

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
		c.Replica = defaultReplica()
	}
	if d, ok := t.positive("shutdown_grace"); ok {
		c.ShutdownGrace = d
	}
	if d, ok := t.positive("max_clock_skew"); ok {
		c.MaxClockSkew = d
	}
}

// defaultReplica is "<hostname>-<pid>": unique per process on a fleet.
func defaultReplica() string {
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

func badNameRune(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }

func (c *Config) readRedis(t table) {
	c.readRedisURLEnv(t)
	if v, ok := t.str("url"); ok && v != "" {
		if _, err := redis.ParseURL(v); err != nil {
			// The URL may hold a password: never quote it, nor an
			// *url.Error, which would.
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err
			}
			t.errorf("url", "invalid Redis URL (want redis://[user:password@]host:port[/db], rediss://... or unix://...): %v", err)
		} else {
			c.RedisURL = v
		}
	}
	if v, ok := t.str("prefix"); ok {
		switch {
		case v == "":
			t.errorf("prefix", "must not be empty")
		case strings.ContainsAny(v, "{}") || strings.IndexFunc(v, badNameRune) >= 0:
			t.errorf("prefix", "%q must not contain braces (they are Redis Cluster hash tags in slotd's keys), whitespace or control characters", v)
		default:
			c.Prefix = v
		}
	}
	c.readRedisMode(t)
	c.readRedisTLS(t)
}

func (c *Config) readHTTP(t table) {
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

// rawPolicy is a policy table as written: each key unset, valid, or invalid
// (already reported), so that a task inherits [defaults] key by key and a
// bad default is reported once, not once per task.
type rawPolicy struct {
	lease, doneTTL, timeout, deadline opt[time.Duration]
	maxAttempts                       opt[int]
	catchup                           opt[string]
}

type opt[T any] struct {
	v        T
	set, bad bool
	where    string // " (from [defaults])" when inherited
}

func (o opt[T]) or(def opt[T]) opt[T] {
	if o.set {
		return o
	}
	if def.set {
		def.where = " (from [defaults])"
	}
	return def
}

func readPolicy(t table) rawPolicy {
	var rp rawPolicy
	rp.lease = t.duration("lease", func(d time.Duration) string {
		if d < MinLease {
			return fmt.Sprintf("%v is shorter than %v: the lease is renewed every lease/3 and could not be renewed reliably", d, MinLease)
		}
		return ""
	})
	rp.doneTTL = t.duration("done_ttl", positive)
	rp.timeout = t.duration("timeout", positive)
	rp.deadline = t.duration("deadline", positive)
	rp.maxAttempts = t.integer("max_attempts", 1, MaxAttemptsLimit,
		"the fencing token is slot_unix_seconds*1000 + attempt")
	if v, ok := t.str("catchup"); ok {
		rp.catchup.set = true
		if v != CatchupLatest && v != CatchupNone {
			rp.catchup.bad = true
			t.errorf("catchup", "%q: want %q or %q", v, CatchupLatest, CatchupNone)
		}
		rp.catchup.v = v
	} else if t.has("catchup") {
		rp.catchup.set, rp.catchup.bad = true, true
	}
	return rp
}

func positive(d time.Duration) string {
	if d <= 0 {
		return fmt.Sprintf("%v: must be positive", d)
	}
	return ""
}

func (c *Config) readTasks(top table, defaults rawPolicy, log *slog.Logger) {
	v, ok := top.m["task"]
	if !ok {
		return
	}
	var list []map[string]any
	switch v := v.(type) {
	case []map[string]any:
		list = v
	case []any:
		for _, e := range v {
			m, ok := e.(map[string]any)
			if !ok {
				top.errorf("task", "must be an array of tables ([[task]]), not an array of %s", tomlType(e))
				return
			}
			list = append(list, m)
		}
	default:
		top.errorf("task", "must be an array of tables: write [[task]], not [task] or task = ...")
		return
	}
	seen := make(map[string]int, len(list))
	for i, m := range list {
		if t, ok := readTask(m, i+1, seen, defaults, top.p, log); ok {
			c.Tasks = append(c.Tasks, t)
		}
	}
}

// readTask validates the n-th [[task]] (1-based) and builds its job. It
// reports its problems to t.p and returns false if there were any.
func readTask(m map[string]any, n int, seen map[string]int, defaults rawPolicy, p *problems, log *slog.Logger) (Task, bool) {
	before := len(p.errs)
	t := table{m: m, path: "task", p: p, scope: fmt.Sprintf("task #%d", n)}
	name, nameOK := t.str("name")
	if nameOK && name != "" {
		t.scope = fmt.Sprintf("task %q (task #%d)", name, n)
	}
	t.checkKeys(taskKeys)

	task := Task{Name: name}
	switch {
	case !t.has("name"):
		t.errorf("name", "required")
	case !nameOK:
	case name == "":
		t.errorf("name", "required")
	case !taskNameRE.MatchString(name):
		t.errorf("name", "%q is not a valid task name: it becomes part of Redis keys inside hash-tag braces ({task:slot}), so it must match %s", name, taskNameRE)
	default:
		if first, dup := seen[name]; dup {
			t.errorf("name", "%q is already used by task #%d; task names must be unique", name, first)
		} else {
			seen[name] = n
		}
	}

	// The schedule: check the zone on its own first, so that its error
	// names the timezone key rather than the schedule.
	tz, tzOK := t.str("timezone")
	if tzOK {
		task.Timezone = tz
		if _, err := loadLocation(tz); err != nil {
			t.errorf("timezone", "%v", err)
			tzOK = false
		}
	} else if !t.has("timezone") {
		tzOK = true
	}
	spec, specOK := t.str("schedule")
	task.Spec = spec
	switch {
	case !t.has("schedule"):
		t.errorf("schedule", "required (a cron spec such as \"0 * * * *\", or \"@every 5m\")")
	case specOK && tzOK:
		s, err := ParseSchedule(spec, tz)
		if err != nil {
			t.wrapf("schedule", err)
		}
		task.Schedule = s
	}

	task.Params = map[string]any{}
	paramsOK := true
	if v, ok := m["params"]; ok {
		if pm, isTable := v.(map[string]any); isTable {
			task.Params = pm
		} else {
			t.errorf("params", "must be a table ([task.params]), not %s", tomlType(v))
			paramsOK = false
		}
	}
	plugin, pluginOK := t.str("plugin")
	task.Plugin = plugin
	switch {
	case !t.has("plugin"):
		t.errorf("plugin", "required (registered plugins: %s)", registered())
	case !pluginOK:
	default:
		factory, known := tasks.Lookup(plugin)
		if !known {
			t.errorf("plugin", "unknown plugin %q (registered plugins: %s)", plugin, registered())
		} else if paramsOK {
			job, err := build(factory, plugin, task.Params, log.With("task", name))
			if err != nil {
				t.wrapf("params", err)
			}
			task.Job = job
		}
	}

	task.Policy = resolvePolicy(t, readPolicy(t), defaults, task.Schedule)
	return task, len(p.errs) == before
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

func registered() string {
	names := tasks.Plugins()
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// resolvePolicy merges a task's policy keys over [defaults] and checks the
// keys against each other and against the schedule (nil if invalid). Keys
// already found invalid are left out of the cross-checks.
func resolvePolicy(t table, own, defaults rawPolicy, sched *Schedule) Policy {
	lease := own.lease.or(defaults.lease)
	doneTTL := own.doneTTL.or(defaults.doneTTL)
	maxAttempts := own.maxAttempts.or(defaults.maxAttempts)
	timeout := own.timeout.or(defaults.timeout)
	catchup := own.catchup.or(defaults.catchup)
	deadline := own.deadline.or(defaults.deadline)

	pol := Policy{
		Lease:       pick(lease, DefaultLease),
		MaxAttempts: pick(maxAttempts, DefaultMaxAttempts),
		Timeout:     pick(timeout, DefaultTimeout),
		Catchup:     pick(catchup, DefaultCatchup),
		Deadline:    pick(deadline, 0),
	}
	// The window is unknown when the deadline is invalid, or unset with an
	// invalid schedule: then there is nothing to compare done_ttl with.
	windowKnown := !deadline.bad && (pol.Deadline > 0 || sched != nil)
	var window time.Duration
	if windowKnown {
		window = pol.Deadline
		if window == 0 {
			window = sched.MaxGap()
		}
	}
	switch {
	case !doneTTL.set || doneTTL.bad:
		pol.DoneTTL = max(DefaultMinDoneTTL, window)
	default:
		pol.DoneTTL = doneTTL.v
		switch {
		case !windowKnown || doneTTL.v >= window:
		case pol.Deadline > 0:
			t.errorf("done_ttl", "%v%s is shorter than deadline %v%s: a slot could run again after its done marker expires; raise done_ttl",
				doneTTL.v, doneTTL.where, deadline.v, deadline.where)
		default:
			t.errorf("done_ttl", "%v%s is shorter than the slot window %v (the longest gap between fire times of %q): a slot could run again after its done marker expires; raise done_ttl or set deadline",
				doneTTL.v, doneTTL.where, window, sched.spec)
		}
	}
	if !lease.bad && !doneTTL.bad && pol.Lease > pol.DoneTTL {
		t.errorf("lease", "%v%s is longer than done_ttl %v%s", pol.Lease, lease.where, pol.DoneTTL, doneTTL.where)
	}
	return pol
}

func pick[T any](o opt[T], def T) T {
	if o.set && !o.bad {
		return o.v
	}
	return def
}

// problems collects every error found in one configuration.
type problems struct {
	source string
	errs   []error
}

func (p *problems) add(err error) {
	if p.source != "" {
		err = fmt.Errorf("%s: %w", p.source, err)
	}
	p.errs = append(p.errs, err)
}

func (p *problems) err() error { return errors.Join(p.errs...) }

// table is one TOML table being read: a section, or one [[task]].
type table struct {
	m     map[string]any // nil when the table is absent
	path  string         // its key path, "" at the top
	scope string         // for a task, `task "name" (task #2)`
	p     *problems
}

// key returns how errors name key: its full path in a section ("daemon.replica"),
// its own name within a task's scope ("lease").
func (t table) key(key string) string {
	switch {
	case t.scope != "":
		return toml.Key{key}.String()
	case t.path != "":
		return toml.Key{t.path, key}.String()
	}
	return toml.Key{key}.String()
}

func (t table) prefix() string {
	if t.scope != "" {
		return t.scope + ": "
	}
	return ""
}

func (t table) errorf(key, format string, args ...any) {
	t.p.add(fmt.Errorf("%s%s: %s", t.prefix(), t.key(key), fmt.Sprintf(format, args...)))
}

func (t table) wrapf(key string, err error) {
	t.p.add(fmt.Errorf("%s%s: %w", t.prefix(), t.key(key), err))
}

func (t table) has(key string) bool {
	_, ok := t.m[key]
	return ok
}

// sub returns the section key of the top-level table, checking its keys.
func (t table) sub(key string, allowed []string) table {
	s := table{path: key, p: t.p}
	v, ok := t.m[key]
	if !ok {
		return s
	}
	m, isTable := v.(map[string]any)
	if !isTable {
		t.errorf(key, "must be a table ([%s]), not %s", key, tomlType(v))
		return s
	}
	s.m = m
	s.checkKeys(allowed)
	return s
}

// checkKeys reports every key of t that is not in allowed, by its full path
// (such as "task.retries"); the contents of unknown tables are not
// reported again.
func (t table) checkKeys(allowed []string) {
	var unknown []string
	for k := range t.m {
		if !slices.Contains(allowed, k) {
			unknown = append(unknown, k)
		}
	}
	slices.Sort(unknown)
	for _, k := range unknown {
		full := toml.Key{k}
		if t.path != "" {
			full = toml.Key{t.path, k}
		}
		t.p.add(fmt.Errorf("%sunknown key %q (known keys here: %s)", t.prefix(), full.String(), strings.Join(allowed, ", ")))
	}
}

// str returns the string at key; false if it is absent or not a string
// (reported).
func (t table) str(key string) (string, bool) {
	v, ok := t.m[key]
	if !ok {
		return "", false
	}
	s, ok := v.(string)
	if !ok {
		t.errorf(key, "must be a string, not %s", tomlType(v))
	}
	return s, ok
}

// positive returns the positive duration at key; false if it is absent or
// invalid (reported).
func (t table) positive(key string) (time.Duration, bool) {
	o := t.duration(key, positive)
	return o.v, o.set && !o.bad
}

// duration reads a duration string such as "15s" at key; check returns a
// problem with a well-formed value, or "".
func (t table) duration(key string, check func(time.Duration) string) opt[time.Duration] {
	v, ok := t.m[key]
	if !ok {
		return opt[time.Duration]{}
	}
	o := opt[time.Duration]{set: true, bad: true}
	s, ok := v.(string)
	if !ok {
		t.errorf(key, "must be a duration string such as \"15s\", \"10m\" or \"1h30m\", not %s", tomlType(v))
		return o
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		t.errorf(key, "%q: invalid duration (want a number with a unit: \"500ms\", \"15s\", \"10m\", \"1h30m\")", s)
		return o
	}
	if msg := check(d); msg != "" {
		t.errorf(key, "%s", msg)
		return o
	}
	o.v, o.bad = d, false
	return o
}

// integer reads an integer in [lo, hi] at key; why explains the bounds.
func (t table) integer(key string, lo, hi int64, why string) opt[int] {
	v, ok := t.m[key]
	if !ok {
		return opt[int]{}
	}
	o := opt[int]{set: true, bad: true}
	n, ok := v.(int64)
	switch {
	case !ok:
		t.errorf(key, "must be an integer, not %s", tomlType(v))
	case n < lo || n > hi:
		t.errorf(key, "%d is out of range: want %d to %d (%s)", n, lo, hi, why)
	default:
		o.v, o.bad = int(n), false
	}
	return o
}

// tomlType names the TOML type of a decoded value, for error messages.
func tomlType(v any) string {
	switch v := v.(type) {
	case string:
		if len(v) > 64 {
			v = v[:61] + "..."
		}
		return fmt.Sprintf("the string %q", v)
	case int64:
		return fmt.Sprintf("the integer %d", v)
	case float64:
		return fmt.Sprintf("the float %v", v)
	case bool:
		return fmt.Sprintf("the boolean %v", v)
	case time.Time:
		return "a date-time"
	case map[string]any:
		return "a table"
	case []map[string]any:
		return "an array of tables"
	case []any:
		return "an array"
	}
	return fmt.Sprintf("a %T", v)
}

// envNameRE is what an environment variable's name may look like.
var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// readRedisURLEnv reads [redis] url_env, the name of an environment
// variable holding the Redis URL, so that the URL's password can come from
// a secret store (a Kubernetes Secret, a systemd EnvironmentFile) instead of
// the config file. It is read once, at load, like the rest of the file.
func (c *Config) readRedisURLEnv(t table) {
	name, ok := t.str("url_env")
	if !ok {
		return
	}
	if u, _ := t.str("url"); u != "" {
		t.errorf("url_env", "set either url or url_env, not both")
		return
	}
	if !envNameRE.MatchString(name) {
		t.errorf("url_env", "%q is not an environment variable name (want [A-Za-z_][A-Za-z0-9_]*)", name)
		return
	}
	v, set := os.LookupEnv(name)
	if v == "" {
		why := "is not set"
		if set {
			why = "is empty"
		}
		t.errorf("url_env", "environment variable %s %s: it must hold the Redis URL (redis://[user:password@]host:port[/db])", name, why)
		return
	}
	if _, err := redis.ParseURL(v); err != nil {
		var ue *url.Error // it would quote the URL, password included
		if errors.As(err, &ue) {
			err = ue.Err
		}
		t.errorf("url_env", "environment variable %s: invalid Redis URL (want redis://[user:password@]host:port[/db], rediss://... or unix://...): %v", name, err)
		return
	}
	c.RedisURL = v
}
