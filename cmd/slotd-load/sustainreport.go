package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// historyNotRecorded is the engine's warning when a run's history append
// failed (scheduler/history.go): the record is lost.
const historyNotRecorded = "run history not recorded"

// sustainedRun is the sustained mode's report.
type sustainedRun struct {
	Config     sustainedConfig    `json:"config"`
	Baseline   Baseline           `json:"baseline"`
	Sustained  sustainedReport    `json:"sustained"`
	Replicas   []sustainedReplica `json:"replicas"`
	RSSSamples []rssSample        `json:"rss_samples"`
	Scrapes    scrapeReport       `json:"scrapes"` // with -scrape
	Checks     map[string]int     `json:"checks"`  // slots checked: every tick slot recorded, and the window's
	Violations []string           `json:"violations"`
}

type sustainedConfig struct {
	Store    string `json:"store"` // redis, etcd (3 members) or zookeeper (3 nodes)
	Replicas int    `json:"replicas"`
	Rate     int    `json:"rate"`    // tasks, each due every EveryS seconds
	EveryS   int    `json:"every_s"` // 1: sustained; more: a burst of Rate slots every EveryS seconds
	Plugin   string `json:"plugin"`
	Duration string `json:"duration"` // the measured window
	WarmupS  int    `json:"warmup_s"`
	Lease    string `json:"lease"`
}

// sustainedReport holds the figures over the measured window. Per slot
// means per executed slot of the window.
type sustainedReport struct {
	WindowStart  string    `json:"window_start"` // the first measured slot time
	WindowS      float64   `json:"window_s"`     // whole seconds of slots measured
	CountersS    float64   `json:"counters_s"`   // between the two reads of the counters
	SlotsPerS    float64   `json:"slots_per_s"`  // executed / window
	Expected     int       `json:"slots_expected"`
	Executed     int       `json:"slots_executed"` // slots of the window that ran (at least once)
	Missed       int       `json:"slots_missed"`   // expected − executed: no run before the slot's window closed
	Duplicates   int       `json:"duplicates"`     // runs beyond one per slot, in the window
	LaterAttempt int       `json:"slots_run_as_later_attempt"`
	StartDelay   latencies `json:"start_delay"` // first run's start − slot time (http: the sink's receipt)
	// Dues is the start delay of each due time of the window on its own
	// (a burst of -rate slots, -every apart): one run holds many bursts,
	// so a burst's p99 reads as a median over them, not as one burst's.
	Dues dueLatencies `json:"per_due_time"`
	// HistoryNotRecorded counts the replicas' "run history not recorded"
	// warnings over the whole run: each is a history record dropped.
	HistoryNotRecorded int            `json:"history_not_recorded"`
	LogWarnings        map[string]int `json:"replica_log_warnings"` // warn and error lines by message, whole run

	// The store's CPU: Redis's INFO cpu used_cpu_user + used_cpu_sys
	// delta; etcd's and ZooKeeper's members' /proc utime + stime deltas,
	// summed over the members (0 on endpoints given with -endpoints).
	RedisCPU        float64 `json:"redis_cpu_s"`
	RedisCPUPerSlot float64 `json:"redis_cpu_us_per_slot"` // µs
	// RatioToPlain is RedisCPUPerSlot over the baseline's plain slot
	// (Baseline.PlainSlotCPU: three pipelined commands), on Redis.
	RatioToPlain float64 `json:"redis_cpu_ratio_to_plain_slot,omitempty"`
	// RatioToFloor is RedisCPUPerSlot over the floor's (-floor:
	// Baseline.FloorSlotCPU, the same number of slots on the same server).
	RatioToFloor     float64            `json:"redis_cpu_ratio_to_floor_slot,omitempty"`
	StoreRSSMB       float64            `json:"store_rss_mb,omitempty"`  // etcd's or ZooKeeper's members' RSS summed at the window's end
	RedisCmdsPerSlot float64            `json:"redis_commands_per_slot"` // INFO commandstats delta, summed, INFO left out
	RedisCmds        map[string]float64 `json:"redis_commands_per_slot_by_name"`
	// RedisKeyLookups: keys read per slot (INFO stats keyspace_hits +
	// keyspace_misses delta), by scripts and plain commands alike: each
	// key of an MGET counts, where commandstats counts the call once.
	RedisKeyLookups float64 `json:"redis_key_lookups_per_slot,omitempty"`
	// LuaCounted: the server counts the commands a script calls in
	// commandstats (checked at start), so the figures above include them.
	LuaCounted         bool    `json:"lua_calls_counted_in_commandstats"`
	ReplicaCPU         float64 `json:"replica_cpu_s"`           // /proc utime + stime deltas, summed over the replicas
	ReplicaCPUPerSlot  float64 `json:"replica_cpu_us_per_slot"` // µs, summed over the replicas
	ClientTripsPerSlot float64 `json:"client_round_trips_per_slot"`
	ClientCmdsPerSlot  float64 `json:"client_commands_per_slot"`
	ToolCPU            float64 `json:"tool_cpu_s"` // this process (sink, records) over the window: it shares the cores
	// LoadAvg is the machine's load averages (1, 5, 15 min) at the
	// window's start and end: above the core count, others shared them.
	LoadAvg   [2]string   `json:"load_avg"`
	PeakRSSMB float64     `json:"peak_rss_mb"` // the largest replica's VmHWM
	Sink      *sinkReport `json:"sink,omitempty"`
}

type sustainedReplica struct {
	ID string `json:"id"`
	procStats
	goPeaks
	WindowCPU  float64 `json:"window_cpu_s"`
	CPUPerSlot float64 `json:"cpu_us_per_slot"`
}

// windowSlots calls f with each task's slot of the window.
func windowSlots(rate int, every time.Duration, w0, w1 time.Time, f func(task string, at time.Time)) {
	for at := w0; at.Before(w1); at = at.Add(every) {
		for i := range rate {
			f(fmt.Sprintf("%s%05d", tickPrefix, i), at)
		}
	}
}

func (rep *sustainedRun) analyze(recs *records, o options, w0, w1 time.Time, before, after snapshot) {
	s := &rep.Sustained
	s.WindowStart = w0.UTC().Format(time.RFC3339)
	s.WindowS = w1.Sub(w0).Seconds()
	s.CountersS = after.at.Sub(before.at).Seconds()
	var starts []time.Duration
	byDue := map[time.Time][]time.Duration{}
	windowSlots(o.rate, o.every, w0, w1, func(task string, at time.Time) {
		s.Expected++
		runs := recs.get(task, at)
		if runs == nil || len(runs.attempts) == 0 {
			return
		}
		s.Executed++
		s.Duplicates += len(runs.attempts) - 1
		first := runs.attempts[0]
		for _, a := range runs.attempts {
			if a.start < first.start {
				first = a
			}
		}
		if first.n > 1 {
			s.LaterAttempt++
		}
		d := time.Unix(0, first.start).Sub(at)
		starts = append(starts, d)
		byDue[at] = append(byDue[at], d)
	})
	s.Missed = s.Expected - s.Executed
	s.StartDelay = summarise(starts)
	s.Dues = summariseDues(byDue)
	s.SlotsPerS = float64(s.Executed) / s.WindowS
	perSlot := func(x float64) float64 {
		if s.Executed == 0 {
			return 0
		}
		return x / float64(s.Executed)
	}
	s.RedisCPU = after.redisCPU - before.redisCPU
	s.RedisCPUPerSlot = perSlot(s.RedisCPU * 1e6)
	if p := rep.Baseline.PlainSlotCPU; p > 0 {
		s.RatioToPlain = s.RedisCPUPerSlot / p
	}
	if f := rep.Baseline.FloorSlotCPU; f > 0 {
		s.RatioToFloor = s.RedisCPUPerSlot / f
	}
	s.StoreRSSMB = after.storeRSSMB
	s.RedisCmds = map[string]float64{}
	var total int64
	for name, n := range after.commands {
		if name == "info" { // this tool's own
			continue
		}
		if d := n - before.commands[name]; d > 0 {
			s.RedisCmds[name] = perSlot(float64(d))
			total += d
		}
	}
	s.RedisCmdsPerSlot = perSlot(float64(total))
	s.RedisKeyLookups = perSlot(float64(after.keyLookups - before.keyLookups))
	var trips, cmds int64
	for _, t := range recs.tails {
		c0, ok0 := recs.countersAt(t.replica, before.at, false)
		c1, ok1 := recs.countersAt(t.replica, after.at, true)
		if !ok0 || !ok1 {
			rep.Violations = append(rep.Violations, fmt.Sprintf("replica %s: no hook counters around the window", t.replica))
			continue
		}
		trips += c1.trips - c0.trips
		cmds += c1.cmds - c0.cmds
	}
	s.ClientTripsPerSlot = perSlot(float64(trips))
	s.ClientCmdsPerSlot = perSlot(float64(cmds))
	s.ToolCPU = after.toolCPU - before.toolCPU
	s.LoadAvg = [2]string{before.loadAvg, after.loadAvg}
}

func (rep *sustainedRun) analyzeReplicas(reps []*replica, smp *sampler, recs *records, before, after snapshot) {
	s := &rep.Sustained
	for _, r := range reps {
		cpu := after.replicaCPU[r.id] - before.replicaCPU[r.id]
		sr := sustainedReplica{ID: r.id, procStats: r.final, goPeaks: recs.peaks[r.id], WindowCPU: cpu}
		if s.Executed > 0 {
			sr.CPUPerSlot = cpu * 1e6 / float64(s.Executed)
		}
		rep.Replicas = append(rep.Replicas, sr)
		s.ReplicaCPU += cpu
		s.PeakRSSMB = max(s.PeakRSSMB, r.final.PeakRSSMB)
	}
	if s.Executed > 0 {
		s.ReplicaCPUPerSlot = s.ReplicaCPU * 1e6 / float64(s.Executed)
	}
	rep.RSSSamples = smp.samples
}

// readLogs counts the replicas' warn and error log lines by message (the
// history appends that failed among them).
func (rep *sustainedRun) readLogs(dir string, ids []string) error {
	s := &rep.Sustained
	s.LogWarnings = map[string]int{}
	for _, id := range ids {
		f, err := os.Open(filepath.Join(dir, id+".log"))
		if err != nil {
			return err
		}
		// A line may be long: an error naming thousands of keys in a
		// burst (a scanner's limit would end the report there).
		br := bufio.NewReaderSize(f, 64<<10)
		for {
			b, rerr := br.ReadBytes('\n')
			if len(bytes.TrimSpace(b)) > 0 {
				var line struct{ Level, Msg string }
				if err := json.Unmarshal(b, &line); err != nil {
					s.LogWarnings["(not a JSON log line)"]++
				} else if line.Level == "WARN" || line.Level == "ERROR" {
					s.LogWarnings[line.Msg]++
				}
			}
			if rerr != nil {
				if rerr != io.EOF {
					err = rerr
				}
				break
			}
		}
		f.Close()
		if err != nil {
			return fmt.Errorf("log of %s: %w", id, err)
		}
	}
	s.HistoryNotRecorded = s.LogWarnings[historyNotRecorded]
	return nil
}

// check finds correctness violations: in every tick slot recorded (the
// warm-up's and the settling's included), no attempt number runs twice,
// no slot succeeds twice or runs more than three attempts. A missed slot
// is a figure, not a violation: it is what overload looks like.
func (rep *sustainedRun) check(recs *records, w0, w1 time.Time) {
	rep.Checks = map[string]int{}
	for _, k := range slices.Sorted(maps.Keys(recs.slots)) {
		s := recs.slots[k]
		at := time.Unix(0, s.slot).UTC()
		if !strings.HasPrefix(s.task, tickPrefix) {
			rep.Violations = append(rep.Violations, fmt.Sprintf("%s slot %s: not a task of this run", s.task, at.Format(time.TimeOnly)))
			continue
		}
		rep.Checks["tick"]++
		if !at.Before(w0) && at.Before(w1) {
			rep.Checks["window"]++
		}
		rep.Violations = append(rep.Violations, slotViolations(fmt.Sprintf("%s slot %s", s.task, at.Format(time.TimeOnly)), s)...)
	}
	if rep.Sustained.Executed == 0 {
		rep.Violations = append(rep.Violations, "no slot of the window ran")
	}
}

// summary is the one-line summary.
func (rep *sustainedRun) summary() string {
	c, s := rep.Config, rep.Sustained
	var rss []string
	for _, r := range rep.Replicas {
		rss = append(rss, fmt.Sprintf("%s %.0f", r.ID, r.PeakRSSMB))
	}
	return fmt.Sprintf("sustained %s %d every %ds × %s on %d replicas, %s: %.0f slots/s; %d expected, %d executed, %d missed, %d duplicates; "+
		"start p50 %.0f ms, p99 %.0f ms, max %.0f ms; history not recorded %d; store %.1f µs (%.1f× a plain slot) and %.2f commands per slot; "+
		"replicas %.1f µs per slot; peak RSS MB %s; load avg %s; violations %d",
		c.Plugin, c.Rate, c.EveryS, c.Duration, c.Replicas, c.Store, s.SlotsPerS, s.Expected, s.Executed, s.Missed, s.Duplicates,
		s.StartDelay.P50, s.StartDelay.P99, s.StartDelay.Max, s.HistoryNotRecorded, s.RedisCPUPerSlot, s.RatioToPlain, s.RedisCmdsPerSlot,
		s.ReplicaCPUPerSlot, strings.Join(rss, ", "), s.LoadAvg[1], len(rep.Violations))
}

func (rep *sustainedRun) writeJSON(w io.Writer) error {
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	return e.Encode(rep)
}

func (rep *sustainedRun) writeTable(w io.Writer) {
	c, s, bl := rep.Config, rep.Sustained, rep.Baseline
	fmt.Fprintf(w, "slotd load, sustained on %s: %d replicas, %d tasks due every %d s (plugin %s, lease %s), window of %s from %s after %d s of warm-up\n\n",
		c.Store, c.Replicas, c.Rate, c.EveryS, c.Plugin, c.Lease, c.Duration, s.WindowStart, c.WarmupS)
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
	row("measure", "slotd")
	row("slots/s sustained", fmt.Sprintf("%.0f (%d tasks due every %d s)", s.SlotsPerS, c.Rate, c.EveryS))
	row("slots expected / executed / missed", fmt.Sprintf("%d / %d / %d", s.Expected, s.Executed, s.Missed))
	row("duplicates (runs beyond one per slot)", s.Duplicates)
	row("slots run as attempt ≥ 2", s.LaterAttempt)
	row("start delay (first run − slot time)", fmt.Sprintf("p50 %.1f ms, p99 %.1f ms, max %.1f ms (n=%d)", s.StartDelay.P50, s.StartDelay.P99, s.StartDelay.Max, s.StartDelay.N))
	if d := s.Dues; d.N > 0 {
		row("… each due time on its own", fmt.Sprintf("%d due times of %d slots: p99 median %.1f ms (%.1f–%.1f), p50 median %.1f ms",
			d.N, rep.Config.Rate, d.P99Median, d.P99Min, d.P99Max, d.P50Median))
	}
	row("history not recorded (whole run)", s.HistoryNotRecorded)
	redis := c.Store == storeRedis || c.Store == ""
	if redis {
		row("Redis CPU per slot", fmt.Sprintf("%.1f µs (%.2f s over %.1f s); %.1f× a plain slot's %.1f µs (baseline)", s.RedisCPUPerSlot, s.RedisCPU, s.CountersS, s.RatioToPlain, bl.PlainSlotCPU))
		lua := "Lua's calls included"
		if !s.LuaCounted {
			lua = "this server does NOT count Lua's calls"
		}
		row("Redis commands per slot ("+lua+")", fmt.Sprintf("%.2f: %s", s.RedisCmdsPerSlot, topCommands(s.RedisCmds)))
		row("Redis key lookups per slot (MGET keys one each)", fmt.Sprintf("%.2f", s.RedisKeyLookups))
	} else {
		row(c.Store+" CPU per slot (3 members)", fmt.Sprintf("%.1f µs (%.2f s over %.1f s); members' RSS %.0f MB", s.RedisCPUPerSlot, s.RedisCPU, s.CountersS, s.StoreRSSMB))
		if len(s.RedisCmds) > 0 {
			row(c.Store+" requests per slot (3 members)", fmt.Sprintf("%.2f: %s", s.RedisCmdsPerSlot, topCommands(s.RedisCmds)))
		}
	}
	row("replica CPU per slot (all replicas)", fmt.Sprintf("%.1f µs (%.2f s)", s.ReplicaCPUPerSlot, s.ReplicaCPU))
	if redis {
		row("per slot, client side (all replicas)", fmt.Sprintf("%.2f round trips, %.2f commands", s.ClientTripsPerSlot, s.ClientCmdsPerSlot))
	}
	row("this tool's CPU in the window", fmt.Sprintf("%.2f s (sink and records; it shares the cores)", s.ToolCPU))
	row("machine load average (1, 5, 15 min)", fmt.Sprintf("%s at the start, %s at the end of the window (%d cores)", s.LoadAvg[0], s.LoadAvg[1], runtime.NumCPU()))
	if sk := s.Sink; sk != nil {
		row("sink", fmt.Sprintf("%d requests over %d TCP connections, %d malformed", sk.Requests, sk.Connections, sk.Malformed))
	}
	for _, r := range rep.Replicas {
		row("replica "+r.ID, fmt.Sprintf("CPU %.2f s in the window (%.1f µs per slot), %.2f s in all; peak RSS %.1f MB; Go peaks: heap %.1f MB, stacks %.1f MB, %d goroutines",
			r.WindowCPU, r.CPUPerSlot, r.CPUSeconds, r.PeakRSSMB, r.HeapMB, r.StacksMB, r.Goroutines))
	}
	if redis {
		row("raw baseline (same server)", fmt.Sprintf("%.0f SET NX PX/s, %d clients pipelined %d; %.0f lock cycles/s sequential; %.0f releases/s pipelined",
			bl.PipelinedClaims, bl.Clients, bl.Batch, bl.SequentialCycles, bl.PipelinedReleases))
		row("plain slot baseline (same server)", fmt.Sprintf("%.1f µs of Redis CPU per slot: SET NX PX, SET XX PX, XADD, pipelined %d slots a round trip (%d slots)",
			bl.PlainSlotCPU, bl.Batch, bl.PlainSlots))
		if bl.FloorSlots > 0 {
			row("floor slot baseline (same server, -floor)", fmt.Sprintf("%.1f µs of Redis CPU per slot over %d slots on %d tasks (internal/redisfloor); slotd's is %.2f× it",
				bl.FloorSlotCPU, bl.FloorSlots, rep.Config.Rate, s.RatioToFloor))
		}
	}
	if sc := rep.Scrapes; sc.Every != "" {
		row("/metrics scraped every "+sc.Every, fmt.Sprintf("%d scrapes of %.0f KiB, %d failed", sc.N, sc.MeanKiB, sc.Errors))
	}
	tw.Flush()
	if len(s.LogWarnings) > 0 {
		fmt.Fprintln(w, "\nreplica log warnings and errors (whole run):")
		for _, m := range slices.Sorted(maps.Keys(s.LogWarnings)) {
			fmt.Fprintf(w, "  %7d  %s\n", s.LogWarnings[m], m)
		}
	}
	fmt.Fprintf(w, "\nchecked slots: %v; violations: %d\n", rep.Checks, len(rep.Violations))
}

// dueLatencies summarises the start delays of each due time on its own:
// the median and the worst of their p99s (and p50s), and every due time's
// p99 in order when there are at most maxDueList of them.
type dueLatencies struct {
	N         int       `json:"n"`
	P50Median float64   `json:"p50_median_ms"`
	P99Median float64   `json:"p99_median_ms"`
	P99Min    float64   `json:"p99_min_ms"`
	P99Max    float64   `json:"p99_max_ms"`
	P99s      []float64 `json:"p99s_ms,omitempty"`
}

const maxDueList = 30

func summariseDues(byDue map[time.Time][]time.Duration) dueLatencies {
	dues := make([]time.Time, 0, len(byDue))
	for at := range byDue {
		dues = append(dues, at)
	}
	if len(dues) == 0 {
		return dueLatencies{}
	}
	slices.SortFunc(dues, time.Time.Compare)
	var p50s, p99s []float64
	for _, at := range dues {
		l := summarise(byDue[at])
		p50s, p99s = append(p50s, l.P50), append(p99s, l.P99)
	}
	out := dueLatencies{N: len(dues)}
	if len(dues) <= maxDueList {
		out.P99s = slices.Clone(p99s)
	}
	out.P50Median, out.P99Median = median(p50s), median(p99s)
	out.P99Min, out.P99Max = slices.Min(p99s), slices.Max(p99s)
	return out
}
