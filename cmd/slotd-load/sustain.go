package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sustained mode (-rate N): N tasks, each due every second, run by every
// replica's engine for -duration after -warmup seconds. Each second is a
// burst of N slots; the figures are taken over the window of whole seconds
// between the warm-up and the end, by the counters of Redis, of each
// replica process and of the tool.

// Plugins of the sustained mode.
const (
	pluginNoop = "noop" // the child's no-op task: one buffered records line per run
	pluginHTTP = "http" // the built-in http plugin, POSTing to the sink
)

// settleAfter is how long after the window's last slot is due the tool
// waits at most for every slot of the window to have run before it stops
// the replicas: every slot's window has closed by then (the deadline is
// the next second), so no attempt of a measured slot can start later;
// those running finish during the replicas' shutdown.
const settleAfter = 2 * time.Second

func (o *options) validateSustained() error {
	for _, name := range []string{"tasks", "fail", "crash", "period", "lease"} {
		if o.set[name] {
			return fmt.Errorf("-%s does not apply with -rate (sustained mode)", name)
		}
	}
	if !o.set["warmup"] {
		o.warmup = 5
	}
	if o.store == "" {
		o.store = storeRedis
	}
	if !o.set["duration"] {
		o.duration = time.Minute
	}
	if o.every == 0 {
		o.every = time.Second
	}
	if o.rounds == 0 {
		o.rounds = 1
	}
	switch {
	case o.store != storeRedis && o.store != storeCluster && o.store != storeEtcd && o.store != storeZooKeeper:
		return fmt.Errorf("-store %q: want %s, %s, %s or %s", o.store, storeRedis, storeCluster, storeEtcd, storeZooKeeper)
	case len(o.endpoints) > 0 && o.store == storeRedis:
		return fmt.Errorf("-endpoints %q: with -store %s, %s or %s only", strings.Join(o.endpoints, ","), storeCluster, storeEtcd, storeZooKeeper)
	case o.rate < 1:
		return fmt.Errorf("-rate %d: want at least 1 task due every second", o.rate)
	case o.plugin != pluginNoop && o.plugin != pluginHTTP:
		return fmt.Errorf("-plugin %q: want %s or %s", o.plugin, pluginNoop, pluginHTTP)
	case o.replicas < 1 || o.replicas > 64:
		return fmt.Errorf("-replicas %d: want 1..64", o.replicas)
	case len(o.sweep) > 0 && o.set["replicas"]:
		return fmt.Errorf("-sweep and -replicas: the sweep gives the replica counts")
	case o.rounds < 1 || o.rounds > 20 || (o.rounds > 1 && len(o.sweep) == 0):
		return fmt.Errorf("-rounds %d: want 1..20, with -sweep", o.rounds)
	case o.httpConns < 0 || o.httpConns > 10000 || (o.httpConns > 0 && o.plugin != pluginHTTP):
		return fmt.Errorf("-http-conns %d: want 1..10000, with -plugin http", o.httpConns)
	case o.warmup < 1:
		return fmt.Errorf("-warmup %d: want at least 1 second with -rate", o.warmup)
	case o.every < time.Second || o.every%time.Second != 0 || time.Minute%o.every != 0:
		return fmt.Errorf("-every %v: want whole seconds dividing a minute", o.every)
	case o.duration < o.every || o.duration%o.every != 0:
		return fmt.Errorf("-duration %v: want a whole number of -every (%v), at least one, with -rate", o.duration, o.every)
	case o.batch < 1:
		return fmt.Errorf("-batch %d: want at least 1", o.batch)
	case o.burstLease < time.Second:
		return fmt.Errorf("-burst-lease %v: slotd wants at least 1s", o.burstLease)
	case o.profile && o.dir == "":
		return fmt.Errorf("-profile needs -dir to keep the profiles in")
	case o.sample <= 0:
		return fmt.Errorf("-sample %v: want > 0", o.sample)
	case o.floor && o.store != storeRedis:
		return fmt.Errorf("-floor with -store %s: the floor is Redis's (one server)", o.store)
	case o.floor && o.rate*(o.warmup+int(o.duration/time.Second)) > maxFloorSlots:
		return fmt.Errorf("-floor: %d slots (-rate × (-warmup + -duration)): want at most %d, the floor keeps them all in Redis until it ends",
			o.rate*(o.warmup+int(o.duration/time.Second)), maxFloorSlots)
	}
	return nil
}

// maxFloorSlots bounds -floor's slots: each holds about 400 B of Redis
// until the floor ends.
const maxFloorSlots = 3_000_000

// runSustained measures, prints the one-line summary on stderr and the
// report on stdout, and returns the exit code.
func runSustained(ctx context.Context, o options, stdout, stderr io.Writer) int {
	rep, err := measureSustained(ctx, o, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "load: %v\n", err)
		return 1
	}
	fmt.Fprintln(stderr, rep.summary())
	return emit(o, rep, rep.Violations, stdout, stderr)
}

// nextDue is the first time at or after t that tasks due every every are.
func nextDue(t time.Time, every time.Duration) time.Time {
	d := t.Truncate(every)
	if d.Before(t) {
		d = d.Add(every)
	}
	return d
}

// writeSustainedConfigs writes each replica's config: o.rate tasks due
// every second on the plugin, url the sink's (http only).
func writeSustainedConfigs(o options, dir, storeSection, url string, ids, listens []string) ([]string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "%s[log]\nlevel = \"warn\"\nformat = \"json\"\n", storeSection)
	fmt.Fprintf(&b, "[defaults]\nlease = %q\ndone_ttl = \"1m\"\nmax_attempts = 3\ntimeout = \"1m\"\ncatchup = \"none\"\n", o.burstLease)
	if o.plugin == pluginHTTP {
		// Every task posts to the one sink in the same second. By default
		// the replicas use the daemon's pool (256 connections per host,
		// kept idle between waves); -http-conns sizes it.
		if o.httpConns > 0 {
			fmt.Fprintf(&b, "[plugins.http]\nmax_idle_per_host = %d\nmax_conns_per_host = %d\n", o.httpConns, o.httpConns)
		}
	}
	spec := "* * * * * *"
	if o.every > time.Second {
		spec = fmt.Sprintf("*/%d * * * * *", o.every/time.Second)
	}
	for i := range o.rate {
		fmt.Fprintf(&b, "[[task]]\nname = \"%s%05d\"\nschedule = %q\nplugin = %q\n", tickPrefix, i, spec, o.plugin)
		if o.plugin == pluginHTTP {
			fmt.Fprintf(&b, "  [task.params]\n  url = %q\n  method = \"POST\"\n  body = \"{}\"\n  timeout = \"5s\"\n", url)
		}
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

// measureSustained runs the sustained measurement and returns its report.
func measureSustained(ctx context.Context, o options, stderr io.Writer) (*sustainedRun, error) {
	dir, cleanup, err := workDir(o.dir)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	progress := progressTo(stderr)
	rep := &sustainedRun{Config: sustainedConfig{Store: o.store, Replicas: o.replicas, Rate: o.rate, EveryS: int(o.every / time.Second), Plugin: o.plugin,
		Duration: o.duration.String(), WarmupS: o.warmup, Lease: o.burstLease.String()}}

	// st measures the store: Redis by INFO (rdb), etcd and ZooKeeper by
	// their members' processes (cons).
	var st storeProbe
	var section string
	if o.store == storeRedis {
		srv, err := startRedis(o.redisServer, dir)
		if err != nil {
			return nil, err
		}
		defer srv.stop()
		st.rdb = redis.NewClient(&redis.Options{Addr: srv.addr, ContextTimeoutEnabled: true})
		defer st.rdb.Close()
		if rep.Sustained.LuaCounted, err = luaCallsCounted(ctx, st.rdb); err != nil {
			return nil, err
		}
		progress("redis-server on %s; raw baseline on %d keys", srv.addr, o.rate)
		if rep.Baseline, err = runBaseline(ctx, srv.addr, o.rate, o.replicas, o.batch); err != nil {
			return nil, err
		}
		if o.floor {
			n := o.rate * (o.warmup + int(o.duration/time.Second))
			progress("floor: %d slots on %d tasks", n, o.rate)
			if rep.Baseline.FloorSlotCPU, err = floorSlots(ctx, st.rdb, n, o.rate, o.batch); err != nil {
				return nil, err
			}
			rep.Baseline.FloorSlots = n
		}
		section = fmt.Sprintf("[redis]\nurl = \"redis://%s/0\"\n", srv.addr)
	} else {
		cons, err := startConsensus(o.store, o.endpoints, 3, dir)
		if err != nil {
			return nil, err
		}
		defer cons.stop()
		st.cons = cons
		section = cons.section()
		progress("%s on %s", o.store, strings.Join(cons.endpoints, ","))
	}

	var sk *sink
	url := ""
	if o.plugin == pluginHTTP {
		if sk, err = startSink(); err != nil {
			return nil, err
		}
		url = sk.url
	}
	ids := make([]string, o.replicas)
	listens := make([]string, o.replicas)
	for i := range ids {
		ids[i] = "r" + strconv.Itoa(i+1)
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		listens[i] = "127.0.0.1:" + strconv.Itoa(port)
	}
	configs, err := writeSustainedConfigs(o, dir, section, url, ids, listens)
	if err != nil {
		return nil, err
	}
	started := time.Now()
	var reps []*replica
	stopAll := func() {
		for _, r := range reps {
			if err := r.stop(30 * time.Second); err != nil {
				rep.Violations = append(rep.Violations, err.Error())
			}
		}
	}
	defer stopAll() // on an early return; a no-op once stopped
	for i, id := range ids {
		r, err := startReplica(id, dir, configs[i], listens[i], o.profile, false)
		if err != nil {
			return nil, err
		}
		reps = append(reps, r)
	}
	for _, r := range reps {
		if err := r.awaitReady(ctx, 60*time.Second+time.Duration(o.rate)*time.Millisecond); err != nil {
			return nil, err
		}
	}
	recs := newRecords(reps)
	recs.sink = sk
	smp := newSampler(reps, o.sample, started)
	var sc *scraper
	if o.scrape > 0 {
		sc = startScraper(reps, o.scrape)
	}
	w := waiter{ctx: ctx, recs: recs, smp: smp}

	// The window: the slots due from w0 to w1 (excluded). Its counters are
	// read a quarter second before w0 and before w1: in a steady state
	// the work of any stretch of that length is the same, and these two
	// reads leave the claims of w0's slots inside, w1's outside.
	w0 := nextDue(time.Now().Add(time.Second+time.Duration(o.warmup)*time.Second), o.every)
	w1 := w0.Add(o.duration)
	recs.window = [2]int64{w0.UnixNano(), w1.UnixNano()}
	progress("%d replicas ready in %v; %d tasks every %v (%s); window %s to %s", o.replicas,
		time.Since(started).Round(time.Millisecond), o.rate, o.every, o.plugin, w0.UTC().Format(time.TimeOnly), w1.UTC().Format(time.TimeOnly))
	const lead = 250 * time.Millisecond
	if err := w.until(w0.Add(-lead)); err != nil {
		return nil, err
	}
	before, err := takeSnapshot(ctx, st, reps)
	if err != nil {
		return nil, err
	}
	if err := w.until(w1.Add(-lead)); err != nil {
		return nil, err
	}
	after, err := takeSnapshot(ctx, st, reps)
	if err != nil {
		return nil, err
	}
	all := o.rate * int(o.duration/o.every)
	if _, err := w.cond(w1.Add(settleAfter), func() bool { return recs.inWindow >= all }); err != nil {
		return nil, err
	}
	progress("window over; stopping the replicas")
	smp.sample()
	if sc != nil {
		rep.Scrapes = sc.finish(o.scrape)
	}
	stopAll()
	if err := recs.poll(); err != nil {
		return nil, err
	}
	if sk != nil {
		sr := sk.close()
		rep.Sustained.Sink = &sr
		if sr.Malformed > 0 {
			rep.Violations = append(rep.Violations, fmt.Sprintf("sink: %d requests without the Slotd-* headers", sr.Malformed))
		}
	}
	rep.analyze(recs, o, w0, w1, before, after)
	rep.analyzeReplicas(reps, smp, recs, before, after)
	if err := rep.readLogs(dir, ids); err != nil {
		return nil, err
	}
	rep.check(recs, w0, w1)
	return rep, nil
}
