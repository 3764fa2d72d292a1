package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

type report struct {
	Config     reportConfig       `json:"config"`
	Baseline   Baseline           `json:"baseline"`
	Burst      burstReport        `json:"burst"`
	Failure    latencies          `json:"failure_handoff"` // release (end of the failed attempt) → next attempt's start
	Crash      crashReport        `json:"crash_takeover"`
	Replicas   []replicaReport    `json:"replicas"`
	RSSSamples []rssSample        `json:"rss_samples"`
	Scrapes    scrapeReport       `json:"scrapes"` // with -scrape
	Checks     map[string]int     `json:"checks"`  // slots checked, by task kind
	Violations []string           `json:"violations"`
	burstCPU   map[string]float64 // by replica id, over the burst's window
}

type reportConfig struct {
	Replicas   int    `json:"replicas"`
	Tasks      int    `json:"tasks"`
	Fail       int    `json:"fail"`
	Crash      int    `json:"crash"`
	Warmup     int    `json:"warmup_bursts"`
	Period     string `json:"period"`
	Lease      string `json:"lease"`
	BurstLease string `json:"burst_lease"`
	Duration   string `json:"duration"`
}

// latencies summarises durations in milliseconds.
type latencies struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50_ms"`
	P99 float64 `json:"p99_ms"`
	Max float64 `json:"max_ms"`
}

func summarise(ds []time.Duration) latencies {
	if len(ds) == 0 {
		return latencies{}
	}
	slices.Sort(ds)
	at := func(q float64) float64 { // nearest rank
		i := int(q*float64(len(ds))+0.999999) - 1
		return ms(ds[max(0, min(i, len(ds)-1))])
	}
	return latencies{N: len(ds), P50: at(0.50), P99: at(0.99), Max: ms(ds[len(ds)-1])}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

type burstReport struct {
	SlotTime   string    `json:"slot_time"`
	StartDelay latencies `json:"start_delay"`  // probe start − slot time, attempt 1 of each burst slot
	ClaimDelay latencies `json:"claim_answer"` // each replica's first claim reply − slot time
	// ClaimsPerS is claims answered / (last answer − slot time).
	ClaimsPerS         float64            `json:"claims_per_s"`
	RatioToPipelined   float64            `json:"ratio_to_pipelined_baseline"`
	ServerCmdsPerSlot  float64            `json:"server_commands_per_slot"` // INFO commandstats delta / slots
	ServerCmds         map[string]float64 `json:"server_commands_per_slot_by_name"`
	ClientTripsPerSlot float64            `json:"client_round_trips_per_slot"` // all replicas, from the go-redis hook
	ClientCmdsPerSlot  float64            `json:"client_commands_per_slot"`
	WindowMS           float64            `json:"window_ms"`
	RedisCPU           float64            `json:"redis_cpu_s"` // redis-server's CPU seconds over the window
	// LaterAttempt counts burst slots (in every burst) that ran as attempt
	// 2 or later: their first claim was counted in Redis but its reply
	// came after the claim's time limit, so nobody ran it until its
	// lease ran out.
	LaterAttempt int `json:"slots_run_as_later_attempt"`
}

type crashReport struct {
	Killed   string    `json:"killed"`
	KilledAt time.Time `json:"killed_at"`
	Lease    string    `json:"lease"`
	// Takeover is the next attempt's start − the killed holder's lease
	// expiry (PTTL read right after the kill); AfterKill is start − kill.
	Takeover  latencies `json:"takeover_after_expiry"`
	AfterKill latencies `json:"start_after_kill"`
	tasks     []string
	expiry    map[string]time.Time
}

type replicaReport struct {
	ID string `json:"id"`
	procStats
	goPeaks
	BurstCPU float64 `json:"burst_cpu_s"` // over the burst's command window
	Killed   bool    `json:"killed"`
}

type rssSample struct {
	AtS float64            `json:"at_s"`
	MB  map[string]float64 `json:"rss_mb"`
}

// sampler reads each live replica's RSS every interval.
type sampler struct {
	reps     []*replica
	every    time.Duration
	start    time.Time
	next     time.Time
	samples  []rssSample
	lastTick time.Time
}

func newSampler(reps []*replica, every time.Duration, start time.Time) *sampler {
	s := &sampler{reps: reps, every: every, start: start, next: time.Now()}
	s.tick()
	return s
}

func (s *sampler) tick() {
	if time.Now().Before(s.next) {
		return
	}
	s.sample()
	s.next = s.next.Add(s.every)
}

func (s *sampler) sample() {
	smp := rssSample{AtS: time.Since(s.start).Round(time.Second).Seconds(), MB: map[string]float64{}}
	for _, r := range s.reps {
		select {
		case <-r.exited:
			continue
		default:
		}
		if p, err := readProc(r.cmd.Process.Pid); err == nil {
			smp.MB[r.id] = p.RSSMB
		}
	}
	s.samples = append(s.samples, smp)
}

func (rep *report) analyzeBurst(recs *records, o options, burst time.Time, before, after snapshot) {
	b := &rep.Burst
	var starts []time.Duration
	for i := range o.tasks {
		if s := recs.get(fmt.Sprintf("%s%05d", burstPrefix, i), burst); s != nil {
			for _, a := range s.attempts {
				if a.n == 1 {
					starts = append(starts, time.Unix(0, a.start).Sub(burst))
				}
			}
		}
	}
	b.StartDelay = summarise(starts)
	var claims []time.Duration
	for _, at := range recs.claims {
		claims = append(claims, time.Unix(0, at).Sub(burst))
	}
	b.ClaimDelay = summarise(claims)
	if n := len(claims); n > 0 {
		last := slices.Max(claims)
		b.ClaimsPerS = float64(n) / last.Seconds()
		if rep.Baseline.PipelinedClaims > 0 {
			b.RatioToPipelined = b.ClaimsPerS / rep.Baseline.PipelinedClaims
		}
	}
	if len(recs.claimed) != o.tasks || len(claims) > o.tasks*o.replicas {
		rep.Violations = append(rep.Violations, fmt.Sprintf("burst: %d first claims of %d slots answered, want every one of %d tasks claimed, at most once by each of %d replicas",
			len(claims), len(recs.claimed), o.tasks, o.replicas))
	}
	b.ServerCmds = map[string]float64{}
	var total int64
	for name, n := range after.commands {
		if name == "info" { // this tool's own
			continue
		}
		if d := n - before.commands[name]; d > 0 {
			b.ServerCmds[name] = float64(d) / float64(o.tasks)
			total += d
		}
	}
	b.ServerCmdsPerSlot = float64(total) / float64(o.tasks)
	var trips, cmds int64
	for _, t := range recs.tails {
		c0, ok0 := recs.countersAt(t.replica, before.at, false)
		c1, ok1 := recs.countersAt(t.replica, after.at, true)
		if !ok0 || !ok1 {
			rep.Violations = append(rep.Violations, fmt.Sprintf("replica %s: no hook counters around the burst window", t.replica))
			continue
		}
		trips += c1.trips - c0.trips
		cmds += c1.cmds - c0.cmds
	}
	b.ClientTripsPerSlot = float64(trips) / float64(o.tasks)
	b.ClientCmdsPerSlot = float64(cmds) / float64(o.tasks)
	b.WindowMS = ms(after.at.Sub(before.at))
	b.RedisCPU = after.redisCPU - before.redisCPU
	rep.burstCPU = map[string]float64{}
	for id, c := range after.replicaCPU {
		rep.burstCPU[id] = c - before.replicaCPU[id]
	}
}

func (rep *report) analyzeRetries(recs *records, o options, failAt, crashAt time.Time) {
	var handoffs []time.Duration
	for i := range o.fail {
		s := recs.get(fmt.Sprintf("%s%03d", failPrefix, i), failAt)
		if a1, a2 := attemptN(s, 1), attemptN(s, 2); a1 != nil && a2 != nil && a1.end > 0 {
			handoffs = append(handoffs, time.Duration(a2.start-a1.end))
		}
	}
	rep.Failure = summarise(handoffs)
	rep.Crash.Lease = o.lease.String()
	var takeovers, afterKill []time.Duration
	for _, task := range rep.Crash.tasks {
		if a2 := attemptN(recs.get(task, crashAt), 2); a2 != nil {
			takeovers = append(takeovers, time.Unix(0, a2.start).Sub(rep.Crash.expiry[task]))
			afterKill = append(afterKill, time.Unix(0, a2.start).Sub(rep.Crash.KilledAt))
		}
	}
	rep.Crash.Takeover = summarise(takeovers)
	rep.Crash.AfterKill = summarise(afterKill)
}

func attemptN(s *slotRuns, n int) *attempt {
	if s == nil {
		return nil
	}
	for _, a := range s.attempts {
		if a.n == n {
			return a
		}
	}
	return nil
}

func (rep *report) analyzeReplicas(reps []*replica, smp *sampler, recs *records) {
	for _, r := range reps {
		rep.Replicas = append(rep.Replicas, replicaReport{ID: r.id, procStats: r.final, goPeaks: recs.peaks[r.id],
			BurstCPU: rep.burstCPU[r.id], Killed: r.killed})
	}
	rep.RSSSamples = smp.samples
}

// check finds correctness violations in every slot the replicas recorded:
// a burst slot runs once, as attempt 1; the measured failure slots run
// twice (a failure, then a success); the crashed holder's slots once more
// after it; no slot succeeds twice, repeats an attempt number or exceeds
// the attempt cap.
func (rep *report) check(recs *records, o options, failAt, crashAt time.Time) {
	rep.Checks = map[string]int{}
	crashed := map[string]bool{}
	for _, t := range rep.Crash.tasks {
		crashed[t] = true
	}
	for _, k := range slices.Sorted(maps.Keys(recs.slots)) {
		s := recs.slots[k]
		at := time.Unix(0, s.slot).UTC()
		name := fmt.Sprintf("%s slot %s", s.task, at.Format(time.TimeOnly))
		rep.Violations = append(rep.Violations, slotViolations(name, s)...)
		kind := strings.TrimSuffix(s.task[:strings.IndexByte(s.task, '-')+1], "-")
		rep.Checks[kind]++
		a1, a2 := attemptN(s, 1), attemptN(s, 2)
		switch {
		case strings.HasPrefix(s.task, burstPrefix):
			// A claim whose reply came too late is not run (fail closed),
			// so attempt 1 may have been counted without running: then
			// the slot runs as attempt 2 once that lease has run out.
			if len(s.attempts) != 1 || !s.attempts[0].okOrRunning() {
				rep.Violations = append(rep.Violations, name+fmt.Sprintf(": %d attempts, want one success", len(s.attempts)))
			}
			if a1 == nil {
				rep.Burst.LaterAttempt++
			}
		case strings.HasPrefix(s.task, failPrefix) && at.Equal(failAt):
			if len(s.attempts) != 2 || a1 == nil || a1.ok || a2 == nil || !a2.ok {
				rep.Violations = append(rep.Violations, name+": want a failed attempt 1, then a successful attempt 2")
			}
		case crashed[s.task] && at.Equal(crashAt):
			if len(s.attempts) != 2 || a1 == nil || a1.end != 0 || a1.replica != rep.Crash.Killed || a2 == nil || !a2.ok {
				rep.Violations = append(rep.Violations, name+": want attempt 1 on the killed replica, then a successful attempt 2 on a peer")
			}
		}
	}
	if rep.Checks[strings.TrimSuffix(burstPrefix, "-")] == 0 {
		rep.Violations = append(rep.Violations, "no burst slot ran")
	}
	if o.crash > 0 && len(rep.Crash.tasks) == 0 {
		rep.Violations = append(rep.Violations, "crash: no slot held by the killed replica")
	}
}

// slotViolations checks what holds for every slot: no attempt number runs
// twice, no slot succeeds twice or runs more than three attempts.
func slotViolations(name string, s *slotRuns) []string {
	var v []string
	oks, seen := 0, map[int]bool{}
	for _, a := range s.attempts {
		if a.ok {
			oks++
		}
		if seen[a.n] {
			v = append(v, name+fmt.Sprintf(": attempt %d ran twice", a.n))
		}
		seen[a.n] = true
	}
	if oks > 1 || len(s.attempts) > 3 {
		v = append(v, name+fmt.Sprintf(": %d successes in %d attempts", oks, len(s.attempts)))
	}
	return v
}

// okOrRunning: a success, or an attempt cut short by the tool's own stop.
func (a *attempt) okOrRunning() bool { return a != nil && (a.ok || a.end == 0) }

func (rep *report) writeJSON(w io.Writer) error {
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	return e.Encode(rep)
}

func (rep *report) writeTable(w io.Writer) {
	c, b := rep.Config, rep.Burst
	fmt.Fprintf(w, "slotd load: %d replicas, %d tasks due at %s (lease %s; after %d warm-up bursts), %d failing, %d crashing (lease %s), every %s\n\n",
		c.Replicas, c.Tasks, b.SlotTime, c.BurstLease, c.Warmup, c.Fail, c.Crash, c.Lease, c.Period)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(cells ...any) {
		for i, cell := range cells {
			if i > 0 {
				fmt.Fprint(tw, "\t")
			}
			fmt.Fprint(tw, cell)
		}
		fmt.Fprintln(tw)
	}
	lat := func(l latencies) string {
		return fmt.Sprintf("p50 %.1f ms, p99 %.1f ms, max %.1f ms (n=%d)", l.P50, l.P99, l.Max, l.N)
	}
	bl := rep.Baseline
	row("measure", "slotd", "raw go-redis baseline (same server, same run)")
	row("claims/s", fmt.Sprintf("%.0f", b.ClaimsPerS), fmt.Sprintf("%.0f SET NX PX, %d clients pipelined %d (ratio %.2f)",
		bl.PipelinedClaims, bl.Clients, bl.Batch, b.RatioToPipelined))
	row("", "", fmt.Sprintf("%.0f lock cycles/s sequential, %.0f releases/s pipelined", bl.SequentialCycles, bl.PipelinedReleases))
	row("claim answered after slot time", lat(b.ClaimDelay), "")
	row("start delay", lat(b.StartDelay), "")
	row("slots run as attempt ≥ 2 (claim reply too late)", b.LaterAttempt, "")
	row("Redis commands per slot (server, Lua's calls included)", fmt.Sprintf("%.2f: %s", b.ServerCmdsPerSlot, topCommands(b.ServerCmds)), "")
	row("burst window", fmt.Sprintf("%.0f ms; redis-server CPU %.2f s", b.WindowMS, b.RedisCPU), "")
	row("per slot, client side (all replicas)", fmt.Sprintf("%.2f round trips, %.2f commands", b.ClientTripsPerSlot, b.ClientCmdsPerSlot), "")
	row("failure handoff (release → next start)", lat(rep.Failure), "")
	row("crash takeover (lease expiry → peer start)", lat(rep.Crash.Takeover), fmt.Sprintf("lease %s; kill → start %s", rep.Crash.Lease, lat(rep.Crash.AfterKill)))
	for _, r := range rep.Replicas {
		note := ""
		if r.Killed {
			note = " (killed -9; until then)"
		}
		row("replica "+r.ID, fmt.Sprintf("CPU %.2f s in the burst window, %.2f s in all; peak RSS %.1f MB%s",
			r.BurstCPU, r.CPUSeconds, r.PeakRSSMB, note),
			fmt.Sprintf("Go peaks: heap %.1f MB, stacks %.1f MB, %d goroutines", r.HeapMB, r.StacksMB, r.Goroutines))
	}
	if sc := rep.Scrapes; sc.Every != "" {
		row("/metrics scraped every "+sc.Every, fmt.Sprintf("%d scrapes of %.0f KiB of text (gzipped on the wire), %d failed; took %s",
			sc.N, sc.MeanKiB, sc.Errors, lat(sc.Took)), "")
	}
	tw.Flush()
	if len(rep.RSSSamples) > 1 {
		fmt.Fprintln(w, "\nRSS samples (MB):")
		for _, s := range rep.RSSSamples {
			var parts []string
			for _, id := range slices.Sorted(maps.Keys(s.MB)) {
				parts = append(parts, fmt.Sprintf("%s %.1f", id, s.MB[id]))
			}
			fmt.Fprintf(w, "  %5.0f s  %s\n", s.AtS, strings.Join(parts, ", "))
		}
	}
	fmt.Fprintf(w, "\nchecked slots: %v; violations: %d\n", rep.Checks, len(rep.Violations))
}

// topCommands lists the per-slot command counts, largest first.
func topCommands(m map[string]float64) string {
	names := slices.Collect(maps.Keys(m))
	sort.Slice(names, func(i, j int) bool { return m[names[i]] > m[names[j]] })
	var parts []string
	for _, n := range names {
		if m[n] >= 0.01 {
			parts = append(parts, fmt.Sprintf("%s %.2f", n, m[n]))
		}
	}
	return strings.Join(parts, ", ")
}
