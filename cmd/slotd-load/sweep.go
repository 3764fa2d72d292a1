package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// A sweep (-sweep 3,6,12) runs the sustained measurement once per replica
// count, rounds times over, interleaved (3, 6, 12, 3, 6, 12, …), each
// run a fresh store and fresh replicas, and reports what a replica added
// to the fleet costs per slot: the replicas' CPU per slot and the store's,
// against the run with the fewest replicas of the same round.

// parseSweep reads -sweep: replica counts, ascending, each 1..64.
func parseSweep(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 64 {
			return nil, fmt.Errorf("-sweep %q: %q is not a replica count 1..64", s, f)
		}
		if len(out) > 0 && n <= out[len(out)-1] {
			return nil, fmt.Errorf("-sweep %q: want ascending replica counts", s)
		}
		out = append(out, n)
	}
	if len(out) < 2 {
		return nil, fmt.Errorf("-sweep %q: want at least two replica counts", s)
	}
	return out, nil
}

// sweepRun is one run of a sweep.
type sweepRun struct {
	Round    int           `json:"round"`
	Replicas int           `json:"replicas"`
	Run      *sustainedRun `json:"run"`
}

// sweepReport is every run of a sweep, and per run after a round's first
// the growth against that first run.
type sweepReport struct {
	Counts []int       `json:"replica_counts"`
	Rounds int         `json:"rounds"`
	Runs   []sweepRun  `json:"runs"`
	Growth []sweepStep `json:"growth"`
}

// sweepStep compares a run with its round's first (fewest replicas).
type sweepStep struct {
	Round int `json:"round"`
	From  int `json:"from_replicas"`
	To    int `json:"to_replicas"`
	// ReplicaUSPerAdded is the growth of the replicas' CPU per slot (all
	// replicas summed) per replica added, µs.
	ReplicaUSPerAdded float64 `json:"replica_us_per_slot_per_added_replica"`
	// StoreGrowth is the store's CPU per slot, relative: 0.1 is 10 % more.
	StoreGrowth float64 `json:"store_cpu_per_slot_growth"`
}

func runSweep(ctx context.Context, o options, counts []int, rounds int, stdout, stderr io.Writer) int {
	rep := sweepReport{Counts: counts, Rounds: rounds}
	var violations []string
	for round := 1; round <= rounds; round++ {
		var first *sustainedRun
		for _, n := range counts {
			oo := o
			oo.replicas = n
			run, err := measureSustained(ctx, oo, stderr)
			if err != nil {
				fmt.Fprintf(stderr, "load: sweep round %d, %d replicas: %v\n", round, n, err)
				return 1
			}
			fmt.Fprintln(stderr, run.summary())
			for _, v := range run.Violations {
				violations = append(violations, fmt.Sprintf("round %d, %d replicas: %s", round, n, v))
			}
			rep.Runs = append(rep.Runs, sweepRun{Round: round, Replicas: n, Run: run})
			if first == nil {
				first = run
				continue
			}
			step := sweepStep{Round: round, From: counts[0], To: n}
			step.ReplicaUSPerAdded = (run.Sustained.ReplicaCPUPerSlot - first.Sustained.ReplicaCPUPerSlot) / float64(n-counts[0])
			if b := first.Sustained.RedisCPUPerSlot; b > 0 {
				step.StoreGrowth = run.Sustained.RedisCPUPerSlot/b - 1
			}
			rep.Growth = append(rep.Growth, step)
		}
	}
	return emit(o, &rep, violations, stdout, stderr)
}

func (rep *sweepReport) writeJSON(w io.Writer) error {
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	return e.Encode(rep)
}

func (rep *sweepReport) writeTable(w io.Writer) {
	if len(rep.Runs) == 0 {
		return
	}
	c := rep.Runs[0].Run.Config
	fmt.Fprintf(w, "slotd load, replica sweep on %s: %d tasks due every %d s (plugin %s), window %s, %d round(s) interleaved\n\n",
		c.Store, c.Rate, c.EveryS, c.Plugin, c.Duration, rep.Rounds)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "round\treplicas\tslots/s\tmissed\tduplicates\tstart p99\tstore µs/slot\treplicas µs/slot\tpeak RSS\tload avg")
	for _, r := range rep.Runs {
		s := r.Run.Sustained
		fmt.Fprintf(tw, "%d\t%d\t%.0f\t%d\t%d\t%.0f ms\t%.1f\t%.1f\t%.0f MB\t%s–%s\n",
			r.Round, r.Replicas, s.SlotsPerS, s.Missed, s.Duplicates, s.StartDelay.P99, s.RedisCPUPerSlot, s.ReplicaCPUPerSlot, s.PeakRSSMB, oneMinute(s.LoadAvg[0]), oneMinute(s.LoadAvg[1]))
	}
	tw.Flush()
	fmt.Fprintln(w, "\nagainst each round's run with the fewest replicas:")
	for _, g := range rep.Growth {
		fmt.Fprintf(w, "  round %d, %d → %d replicas: replicas' CPU per slot %+.1f µs per added replica; store's CPU per slot %+.0f %%\n",
			g.Round, g.From, g.To, g.ReplicaUSPerAdded, 100*g.StoreGrowth)
	}
}

// oneMinute is the first figure of a "1 5 15" load average.
func oneMinute(loadAvg string) string {
	f := strings.Fields(loadAvg)
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}
