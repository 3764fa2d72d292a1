// Command slotd-load measures slotd under load on a real redis-server (issue #5):
// it starts redis-server on a free loopback port, runs N replicas of the
// real daemon (cli.Main "run", each a child process of this binary with a
// "probe" task plugin compiled in) on T tasks due in the same second, and
// reports claims/s, start delay, Redis commands and round trips per slot,
// CPU and peak RSS per replica, failure handoff and crash takeover
// latencies — next to raw go-redis SET NX PX + compare-and-delete measured
// on the same server in the same run.
//
//	go run ./cmd/slotd-load -replicas 3 -tasks 10000              # table; -json for JSON
//	go run ./cmd/slotd-load -replicas 3 -tasks 10000 -duration 10m -period 30s -crash 0   # memory over time
//	go run ./cmd/slotd-load -replicas 3 -tasks 10000 -profile -dir /tmp/load   # CPU and heap profiles
//
// With -rate N it measures sustained load instead (issue #18): N tasks
// due every second for -duration, with a no-op task or the built-in http
// plugin POSTing to a keep-alive sink in this process; it reports slots/s,
// missed and duplicate slots, start delay, and Redis and replica CPU per
// executed slot.
//
//	go run ./cmd/slotd-load -rate 2000 -duration 60s -plugin http
//
// It asserts no timing. It exits 1 when a correctness check fails (a slot
// run twice or not retried as configured, a claim not answered) and 2 on
// bad flags. README.md beside this file explains every flag and every line
// of the report.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Task name prefixes in the generated schedule.
const (
	burstPrefix = "burst-"
	failPrefix  = "fail-"
	crashPrefix = "crash-"
	tickPrefix  = "tick-" // sustained mode: due every second
)

type options struct {
	replicas, tasks, fail, crash, batch int
	warmup                              int
	period, lease, burstLease           time.Duration
	duration, sample, scrape            time.Duration
	redisServer, dir                    string
	store                               string   // redis, cluster, etcd or zookeeper
	endpoints                           []string // -endpoints: a running etcd cluster's or ZooKeeper ensemble's, instead of starting one
	json, profile, floor                bool
	// Sustained mode (rate > 0): rate tasks due every second, run by
	// plugin ("noop" or "http"), measured over duration after warmup
	// seconds.
	rate      int
	every     time.Duration // sustained mode: the tasks are due this often (a burst of rate slots each time)
	plugin    string
	httpConns int             // sustained http: max_idle_per_host and max_conns_per_host per replica; 0: the daemon's default
	sweep     []int           // sustained mode: replica counts to run in turn (-sweep), instead of -replicas
	rounds    int             // with -sweep: the sweep's repetitions, interleaved
	set       map[string]bool // the flags given on the command line
}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("slotd-load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	child := fs.Bool("child", false, "internal: run as one replica")
	config := fs.String("config", "", "internal: the replica's config")
	recordsPath := fs.String("records", "", "internal: the replica's records file")
	noteClaims := fs.Bool("note-claims", true, "internal: record when each claim was answered")
	fs.BoolVar(&o.profile, "profile", false, "each replica writes <id>.cpu.pprof (its whole life) and <id>.heap.pprof (at exit) into -dir; SIGUSR1 to a replica writes <id>.live.heap.pprof (its live heap, then)")
	fs.IntVar(&o.replicas, "replicas", 3, "replicas (child processes)")
	fs.IntVar(&o.tasks, "tasks", 100, "tasks due in the same second at every burst")
	fs.IntVar(&o.fail, "fail", 10, "tasks whose first attempt fails (failure handoff)")
	fs.IntVar(&o.crash, "crash", 3, "tasks whose first attempt runs until cancelled; the replica holding most of them is killed -9 (crash takeover); 0: no crash")
	fs.IntVar(&o.warmup, "warmup", 1, "bursts to let pass before the measured one (connection pools grow in the first); with -rate, seconds (default 5)")
	fs.IntVar(&o.batch, "batch", 256, "pipeline batch size of the raw baseline (the lock package's)")
	fs.DurationVar(&o.period, "period", 10*time.Second, "every task fires every period (whole seconds dividing a minute, at least 4s): the burst at its start, failures half a period later, crashes a second after them")
	fs.DurationVar(&o.lease, "lease", 2*time.Second, "lease of the crash tasks (a takeover waits for it)")
	fs.DurationVar(&o.burstLease, "burst-lease", 15*time.Second, "lease of the burst and failing tasks (slotd's default; a claim's time limit is lease/3)")
	fs.DurationVar(&o.duration, "duration", 0, "keep the replicas running at least this long (memory growth: -duration 10m); with -rate, the measured window (default 60s)")
	fs.IntVar(&o.rate, "rate", 0, "sustained mode: this many tasks, each due every second; 0: the burst measurement")
	fs.DurationVar(&o.every, "every", time.Second, "sustained mode: the tasks are due this often, whole seconds dividing a minute: -rate 10000 -every 10s is a burst of 10,000 slots every 10 s")
	fs.StringVar(&o.plugin, "plugin", "noop", "sustained mode: the tasks' plugin, noop or http (POSTs to a keep-alive sink in this process)")
	fs.IntVar(&o.httpConns, "http-conns", 0, "sustained http: each replica's connections to the sink (max_idle_per_host and max_conns_per_host); 0: the daemon's default (256)")
	fs.DurationVar(&o.sample, "sample", 30*time.Second, "RSS sampling interval")
	fs.DurationVar(&o.scrape, "scrape", 0, "fetch every replica's /metrics (gzipped) this often, as Prometheus would; 0: never")
	fs.StringVar(&o.store, "store", storeRedis, "sustained mode: the store, redis (one server started here), cluster (a Redis Cluster of 3 masters started here), etcd (a 3-member cluster started here) or zookeeper (a 3-node ensemble started here)")
	endpoints := fs.String("endpoints", "", "with -store etcd|zookeeper: comma-separated client URLs (etcd) or host:port (ZooKeeper) of a running store to use instead of starting one")
	sweep := fs.String("sweep", "", "sustained mode: comma-separated ascending replica counts (e.g. 3,6,12), each measured in turn, instead of -replicas; reports each added replica's cost per slot")
	fs.IntVar(&o.rounds, "rounds", 1, "with -sweep: run the sweep this many times, interleaved")
	fs.StringVar(&o.redisServer, "redis-server", "redis-server", "redis-server binary")
	fs.StringVar(&o.dir, "dir", "", "keep configs, records and logs here (default: a temporary directory, removed)")
	fs.BoolVar(&o.json, "json", false, "print the report as JSON")
	fs.BoolVar(&o.floor, "floor", false, "sustained mode on Redis: before the replicas start, run as many slots as the window will (-rate × (-warmup + -duration)) through the floor protocol (internal/redisfloor) on -rate tasks, and report its Redis CPU per slot beside slotd's; then empty the server")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *child {
		return runChild(*config, *recordsPath, o.profile, *noteClaims, stderr)
	}
	if *endpoints != "" {
		o.endpoints = strings.Split(*endpoints, ",")
	}
	o.set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { o.set[f.Name] = true })
	if *sweep != "" {
		var err error
		if o.sweep, err = parseSweep(*sweep); err != nil {
			fmt.Fprintf(stderr, "load: %v\n", err)
			return 2
		}
	}
	if err := o.validate(); err != nil {
		fmt.Fprintf(stderr, "load: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if o.rate > 0 && len(o.sweep) > 0 {
		return runSweep(ctx, o, o.sweep, o.rounds, stdout, stderr)
	}
	if o.rate > 0 {
		return runSustained(ctx, o, stdout, stderr)
	}
	rep, err := measure(ctx, o, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "load: %v\n", err)
		return 1
	}
	return emit(o, rep, rep.Violations, stdout, stderr)
}

// emit writes a measurement's report on stdout, as JSON or a table, and
// returns the exit code: 1 if it could not be written or a correctness
// check (violations) failed.
func emit(o options, rep interface {
	writeJSON(io.Writer) error
	writeTable(io.Writer)
}, violations []string, stdout, stderr io.Writer) int {
	var err error
	if o.json {
		err = rep.writeJSON(stdout)
	} else {
		rep.writeTable(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "load: %v\n", err)
		return 1
	}
	if len(violations) > 0 {
		fmt.Fprintf(stderr, "load: %d correctness checks failed:\n  %s\n", len(violations), strings.Join(violations, "\n  "))
		return 1
	}
	return 0
}

func (o *options) validate() error {
	if o.rate != 0 || o.set["plugin"] {
		return o.validateSustained()
	}
	if o.set["store"] || o.set["endpoints"] {
		return fmt.Errorf("-store and -endpoints apply with -rate (sustained mode) only; the burst measurement runs on Redis")
	}
	if len(o.sweep) > 0 || o.set["rounds"] || o.floor {
		return fmt.Errorf("-sweep, -rounds and -floor apply with -rate (sustained mode) only")
	}
	switch {
	case o.replicas < 1 || o.replicas > 64:
		return fmt.Errorf("-replicas %d: want 1..64", o.replicas)
	case o.tasks < 1:
		return fmt.Errorf("-tasks %d: want at least 1", o.tasks)
	case o.fail < 0 || o.crash < 0 || o.warmup < 0:
		return fmt.Errorf("-fail %d, -crash %d, -warmup %d: want 0 or more", o.fail, o.crash, o.warmup)
	case o.crash > 0 && o.replicas < 2:
		return fmt.Errorf("-crash %d with -replicas %d: a crash needs a peer to take over", o.crash, o.replicas)
	case o.batch < 1:
		return fmt.Errorf("-batch %d: want at least 1", o.batch)
	case o.period%time.Second != 0 || o.period < 4*time.Second || time.Minute%o.period != 0:
		return fmt.Errorf("-period %v: want whole seconds dividing a minute, at least 4s", o.period)
	case o.lease < time.Second || o.burstLease < time.Second:
		return fmt.Errorf("-lease %v, -burst-lease %v: slotd wants at least 1s", o.lease, o.burstLease)
	case o.profile && o.dir == "":
		return fmt.Errorf("-profile needs -dir to keep the profiles in")
	case o.duration < 0 || o.sample <= 0:
		return fmt.Errorf("-duration %v, -sample %v: want ≥ 0 and > 0", o.duration, o.sample)
	}
	return nil
}

// writeConfigs writes each replica's config: the same schedule, its own
// replica id and HTTP port.
func writeConfigs(o options, dir, redisAddr string, ids, listens []string) ([]string, error) {
	var b strings.Builder
	sec := int(o.period / time.Second)
	half := sec / 2
	doneTTL := max(time.Minute, 2*o.period)
	fmt.Fprintf(&b, "[redis]\nurl = \"redis://%s/0\"\n[log]\nlevel = \"warn\"\nformat = \"json\"\n", redisAddr)
	fmt.Fprintf(&b, "[defaults]\nlease = %q\ndone_ttl = %q\nmax_attempts = 3\ntimeout = \"1m\"\ncatchup = \"none\"\n", o.burstLease, doneTTL)
	task := func(name, spec, extra, params string) {
		fmt.Fprintf(&b, "[[task]]\nname = %q\nschedule = %q\nplugin = \"probe\"\n%s", name, spec, extra)
		if params != "" {
			fmt.Fprintf(&b, "  [task.params]\n  %s\n", params)
		}
	}
	burst := fmt.Sprintf("0/%d * * * * *", sec)
	failSpec := fmt.Sprintf("%d/%d * * * * *", half, sec)
	crashSpec := fmt.Sprintf("%d/%d * * * * *", half+1, sec)
	for i := range o.tasks {
		task(fmt.Sprintf("%s%05d", burstPrefix, i), burst, "", "")
	}
	for i := range o.fail {
		task(fmt.Sprintf("%s%03d", failPrefix, i), failSpec, "", "fail_first = true")
	}
	for i := range o.crash {
		// Held by a survivor, it sleeps long enough for the kill and the
		// takeover to be seen, then succeeds.
		task(fmt.Sprintf("%s%03d", crashPrefix, i), crashSpec, fmt.Sprintf("lease = %q\n", o.lease), fmt.Sprintf("sleep_first = %q", 3*o.lease))
	}
	schedule := b.String()
	paths := make([]string, len(ids))
	for i, id := range ids {
		head := fmt.Sprintf("[daemon]\nreplica = %q\nshutdown_grace = \"10s\"\n[http]\nlisten = %q\n", id, listens[i])
		paths[i] = filepath.Join(dir, id+".toml")
		if err := os.WriteFile(paths[i], []byte(head+schedule), 0o644); err != nil {
			return nil, err
		}
	}
	return paths, nil
}
