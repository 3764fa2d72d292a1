package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// pollEvery is how often the tool reads the replicas' records while it
// waits for an event.
const pollEvery = 50 * time.Millisecond

// measure runs the whole measurement and returns its report.
func measure(ctx context.Context, o options, stderr io.Writer) (*report, error) {
	dir, cleanup, err := workDir(o.dir)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	progress := progressTo(stderr)
	rep := &report{Config: reportConfig{Replicas: o.replicas, Tasks: o.tasks, Fail: o.fail, Crash: o.crash,
		Warmup: o.warmup, Period: o.period.String(), Lease: o.lease.String(), BurstLease: o.burstLease.String(), Duration: o.duration.String()}}

	srv, err := startRedis(o.redisServer, dir)
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	rdb := redis.NewClient(&redis.Options{Addr: srv.addr, ContextTimeoutEnabled: true})
	defer rdb.Close()

	progress("redis-server on %s; raw baseline on %d keys", srv.addr, o.tasks)
	if rep.Baseline, err = runBaseline(ctx, srv.addr, o.tasks, o.replicas, o.batch); err != nil {
		return nil, err
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
	configs, err := writeConfigs(o, dir, srv.addr, ids, listens)
	if err != nil {
		return nil, err
	}
	started := time.Now()
	var reps []*replica
	defer func() {
		for _, r := range reps {
			if err := r.stop(30 * time.Second); err != nil {
				rep.Violations = append(rep.Violations, err.Error())
			}
		}
	}()
	for i, id := range ids {
		r, err := startReplica(id, dir, configs[i], listens[i], o.profile, true)
		if err != nil {
			return nil, err
		}
		reps = append(reps, r)
	}
	for _, r := range reps {
		if err := r.awaitReady(ctx, 60*time.Second+time.Duration(o.tasks)*time.Millisecond); err != nil {
			return nil, err
		}
	}
	recs := newRecords(reps)
	sampler := newSampler(reps, o.sample, started)
	var sc *scraper
	if o.scrape > 0 {
		sc = startScraper(reps, o.scrape)
	}
	w := waiter{ctx: ctx, recs: recs, smp: sampler}
	wait, awaitCond := w.until, w.cond

	// The measured burst: the first one at least a second after every
	// replica is ready, after o.warmup more; failures half a period later,
	// the crash a second after them (so that the kill cannot hold up a
	// failure's release).
	burst := time.Now().Add(time.Second).Truncate(o.period).Add(time.Duration(1+o.warmup) * o.period)
	failAt := burst.Add(o.period / 2).Truncate(time.Second)
	crashAt := failAt.Add(time.Second)
	recs.claimAt = burst.Unix()
	rep.Burst.SlotTime = burst.UTC().Format(time.RFC3339)
	progress("%d replicas ready in %v; burst of %d slots at %s", o.replicas, time.Since(started).Round(time.Millisecond),
		o.tasks, burst.UTC().Format(time.TimeOnly))

	w0 := burst.Add(-500 * time.Millisecond)
	if err := wait(w0); err != nil {
		return nil, err
	}
	before, err := takeSnapshot(ctx, storeProbe{rdb: rdb}, reps)
	if err != nil {
		return nil, err
	}
	settled := failAt.Add(-300 * time.Millisecond)
	complete, err := awaitCond(settled, func() bool {
		// Every slot claimed, by its preferred claimant at least (replicas
		// that were told it was taken do not claim it).
		return burstDone(recs, o.tasks, burst) && len(recs.claimed) >= o.tasks
	})
	if err != nil {
		return nil, err
	}
	if complete {
		// Let the losers see the slots done and the history appends
		// land: wait until Redis has seen no command for 200 ms.
		if err := quiesce(ctx, rdb, settled, wait); err != nil {
			return nil, err
		}
	} else {
		rep.Violations = append(rep.Violations, fmt.Sprintf("burst %s: not every slot ran and every claim was answered within %v",
			rep.Burst.SlotTime, settled.Sub(burst)))
	}
	after, err := takeSnapshot(ctx, storeProbe{rdb: rdb}, reps)
	if err != nil {
		return nil, err
	}

	if o.crash > 0 {
		if err := wait(crashAt); err != nil {
			return nil, err
		}
		progress("crash: waiting for the %d crash slots at %s to be held", o.crash, crashAt.UTC().Format(time.TimeOnly))
		if err := rep.crash(ctx, rdb, o, reps, recs, crashAt, awaitCond); err != nil {
			return nil, err
		}
	}
	// Failures and takeovers: wait for their retries.
	retried := func() bool {
		for i := range o.fail {
			if s := recs.get(fmt.Sprintf("%s%03d", failPrefix, i), failAt); s == nil || !anyOK(s) {
				return false
			}
		}
		for _, task := range rep.Crash.tasks {
			if s := recs.get(task, crashAt); s == nil || !anyOK(s) {
				return false
			}
		}
		return true
	}
	if _, err := awaitCond(crashAt.Add(4*o.lease+10*time.Second), retried); err != nil {
		return nil, err
	}
	if err := wait(started.Add(o.duration)); err != nil {
		return nil, err
	}
	sampler.sample()
	if sc != nil {
		rep.Scrapes = sc.finish(o.scrape)
	}
	progress("stopping the replicas")
	for _, r := range reps {
		if err := r.stop(30 * time.Second); err != nil {
			rep.Violations = append(rep.Violations, err.Error())
		}
	}
	if err := recs.poll(); err != nil {
		return nil, err
	}
	rep.analyzeBurst(recs, o, burst, before, after)
	rep.analyzeRetries(recs, o, failAt, crashAt)
	rep.analyzeReplicas(reps, sampler, recs)
	rep.check(recs, o, failAt, crashAt)
	return rep, nil
}

// workDir returns dir, created if need be, or a temporary directory that
// cleanup removes.
func workDir(dir string) (_ string, cleanup func(), _ error) {
	if dir == "" {
		d, err := os.MkdirTemp("", "slotd-load-")
		if err != nil {
			return "", nil, err
		}
		return d, func() { os.RemoveAll(d) }, nil
	}
	return dir, func() {}, os.MkdirAll(dir, 0o755)
}

// progressTo returns the printf of the progress lines on stderr.
func progressTo(stderr io.Writer) func(format string, args ...any) {
	return func(format string, args ...any) {
		fmt.Fprintf(stderr, "%s load: %s\n", time.Now().UTC().Format("15:04:05.000"), fmt.Sprintf(format, args...))
	}
}

// waiter waits for a time or an event while it reads the replicas'
// records and samples their RSS.
type waiter struct {
	ctx  context.Context
	recs *records
	smp  *sampler
}

// until waits until the time given.
func (w waiter) until(until time.Time) error {
	for time.Now().Before(until) {
		w.smp.tick()
		if err := w.recs.poll(); err != nil {
			return err
		}
		select {
		case <-w.ctx.Done():
			return w.ctx.Err()
		case <-time.After(min(pollEvery, time.Until(until))):
		}
	}
	return w.recs.poll()
}

// cond polls until cond holds or until passes; it says which.
func (w waiter) cond(until time.Time, cond func() bool) (bool, error) {
	for {
		if err := w.recs.poll(); err != nil {
			return false, err
		}
		if cond() {
			return true, nil
		}
		if time.Now().After(until) {
			return false, nil
		}
		w.smp.tick()
		select {
		case <-w.ctx.Done():
			return false, w.ctx.Err()
		case <-time.After(pollEvery):
		}
	}
}

// burstDone says whether every burst task's slot at t ran to its end.
func burstDone(recs *records, tasks int, t time.Time) bool {
	for i := range tasks {
		s := recs.get(fmt.Sprintf("%s%05d", burstPrefix, i), t)
		if s == nil || !anyOK(s) {
			return false
		}
	}
	return true
}

func anyOK(s *slotRuns) bool {
	for _, a := range s.attempts {
		if a.ok {
			return true
		}
	}
	return false
}

// crash waits until the crash tasks' slots at t run (their probes started),
// kills -9 the replica running most of them, and reads when each of its
// leases expires.
func (rep *report) crash(ctx context.Context, rdb *redis.Client, o options, reps []*replica, recs *records, t time.Time,
	awaitCond func(time.Time, func() bool) (bool, error)) error {
	slotID := t.UTC().Format("20060102150405")
	keys := make([]string, o.crash)
	tasks := make([]string, o.crash)
	holders := make([]string, o.crash)
	for i := range keys {
		tasks[i] = fmt.Sprintf("%s%03d", crashPrefix, i)
		keys[i] = "slotd:{" + tasks[i] + ":" + slotID + "}"
	}
	running, err := awaitCond(t.Add(10*time.Second), func() bool {
		for i, task := range tasks {
			a := attemptN(recs.get(task, t), 1)
			if a == nil {
				return false
			}
			holders[i] = a.replica
		}
		return true
	})
	if err != nil {
		return err
	}
	if !running {
		return fmt.Errorf("crash: the %d crash slots at %s did not all start within 10s", o.crash, slotID)
	}
	count := map[string]int{}
	victim := ""
	for _, h := range holders {
		if count[h]++; victim == "" || count[h] > count[victim] {
			victim = h
		}
	}
	for _, r := range reps {
		if r.id != victim {
			continue
		}
		r.kill()
		rep.Crash.Killed = victim
		rep.Crash.KilledAt = time.Now()
	}
	rep.Crash.expiry = map[string]time.Time{}
	for i, k := range keys {
		if holders[i] != victim {
			continue
		}
		sent := time.Now()
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		pttl, err := rdb.PTTL(cctx, k).Result()
		cancel()
		if err != nil {
			return fmt.Errorf("crash: pttl %s: %w", k, err)
		}
		if pttl < 0 { // -2: gone, -1: no TTL; neither should be
			return fmt.Errorf("crash: %s has no lease right after the kill (PTTL %v)", k, pttl)
		}
		got := time.Now()
		mid := sent.Add(got.Sub(sent) / 2)
		rep.Crash.tasks = append(rep.Crash.tasks, tasks[i])
		rep.Crash.expiry[tasks[i]] = mid.Add(pttl)
	}
	return nil
}

// quiesce waits until two INFO commandstats reads 200 ms apart see no
// command but INFO itself, or until deadline.
func quiesce(ctx context.Context, rdb *redis.Client, deadline time.Time, wait func(time.Time) error) error {
	total := func() (int64, error) {
		st, err := commandStats(ctx, rdb)
		var n int64
		for name, c := range st {
			if name != "info" {
				n += c
			}
		}
		return n, err
	}
	prev, err := total()
	for err == nil && time.Now().Before(deadline) {
		if err = wait(time.Now().Add(200 * time.Millisecond)); err != nil {
			break
		}
		var n int64
		if n, err = total(); err == nil && n == prev {
			break
		}
		prev = n
	}
	return err
}

// snapshot is what the burst's window is measured between.
type snapshot struct {
	at         time.Time
	commands   map[string]int64   // INFO commandstats; a consensus store's requests (consensus.requests)
	redisCPU   float64            // INFO cpu, user + system seconds; a consensus store's members' CPU from /proc
	keyLookups int64              // INFO stats keyspace_hits + keyspace_misses (Redis)
	storeRSSMB float64            // a consensus store's members' RSS summed (0 on Redis)
	replicaCPU map[string]float64 // /proc, by replica id
	toolCPU    float64            // /proc of this process
	loadAvg    string             // /proc/loadavg: the machine's 1, 5 and 15 minute load averages
}

// storeProbe reads the store's counters: Redis's INFO through rdb, or the
// CPU of a consensus store's member processes.
type storeProbe struct {
	rdb  *redis.Client
	cons *consensus
}

func takeSnapshot(ctx context.Context, st storeProbe, reps []*replica) (snapshot, error) {
	s := snapshot{at: time.Now(), replicaCPU: map[string]float64{}}
	if p, err := readProc(os.Getpid()); err == nil {
		s.toolCPU = p.CPUSeconds
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		s.loadAvg = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	for _, r := range reps {
		s.replicaCPU[r.id] = r.cpu()
	}
	if st.cons != nil {
		s.redisCPU, s.storeRSSMB = st.cons.cpu(), st.cons.rssMB()
		s.commands = st.cons.requests()
		return s, nil
	}
	var err error
	if s.commands, err = commandStats(ctx, st.rdb); err != nil {
		return s, err
	}
	if s.redisCPU, err = serverCPU(ctx, st.rdb); err != nil {
		return s, err
	}
	s.keyLookups, err = keyLookups(ctx, st.rdb)
	return s, err
}
