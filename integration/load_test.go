package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/redistest"
)

// loadReport is the part of the load tool's -json report this test reads.
type loadReport struct {
	Baseline struct {
		Keys             int     `json:"keys"`
		Won              int     `json:"won"`
		SequentialCycles float64 `json:"sequential_cycles_per_s"`
		PipelinedClaims  float64 `json:"pipelined_claims_per_s"`
	} `json:"baseline"`
	Burst struct {
		SlotTime           string  `json:"slot_time"`
		StartDelay         latency `json:"start_delay"`
		ClaimAnswer        latency `json:"claim_answer"`
		ClaimsPerS         float64 `json:"claims_per_s"`
		Ratio              float64 `json:"ratio_to_pipelined_baseline"`
		ServerCmdsPerSlot  float64 `json:"server_commands_per_slot"`
		ClientTripsPerSlot float64 `json:"client_round_trips_per_slot"`
		ClientCmdsPerSlot  float64 `json:"client_commands_per_slot"`
	} `json:"burst"`
	Failure latency `json:"failure_handoff"`
	Scrapes struct {
		N       int     `json:"n"`
		MeanKiB float64 `json:"mean_kib"`
	} `json:"scrapes"`
	Crash struct {
		Killed   string  `json:"killed"`
		Takeover latency `json:"takeover_after_expiry"`
	} `json:"crash_takeover"`
	Replicas []struct {
		ID        string  `json:"id"`
		PeakRSSMB float64 `json:"peak_mb"`
		Killed    bool    `json:"killed"`
	} `json:"replicas"`
	RSSSamples []struct {
		MB map[string]float64 `json:"rss_mb"`
	} `json:"rss_samples"`
	Checks     map[string]int `json:"checks"`
	Violations []string       `json:"violations"`
}

type latency struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50_ms"`
	Max float64 `json:"max_ms"`
}

// The load tool (cmd/slotd-load) runs in a small configuration so that it
// cannot rot: two replicas, fifty tasks in one burst, two failing, one
// crashing. Correctness only, no timing: every burst slot ran exactly once,
// the failures were retried once, the crashed holder's slot was taken over,
// every figure of the report was measured, and the baseline ran.
func TestLoadToolSmall(t *testing.T) {
	t.Parallel()
	redisServer := redistest.Binary(t)
	// Built with -race: the replicas are the real daemon under load.
	bin := built(t, "./cmd/slotd-load", "-race")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "-replicas", "2", "-tasks", "50", "-fail", "2", "-crash", "1",
		"-period", "4s", "-lease", "1s", "-scrape", "1s", "-redis-server", redisServer, "-json")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("load tool: %v\nstderr:\n%s\nstdout:\n%s", err, stderr.String(), stdout.String())
	}
	var r loadReport
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("report is not JSON: %v\n%s", err, stdout.String())
	}
	if len(r.Violations) > 0 {
		t.Errorf("violations: %q", r.Violations)
	}
	// Every slot the replicas ran was checked; the measured burst and at
	// least one failing and one crash slot are among them.
	if r.Checks["burst"] < 50 || r.Checks["fail"] < 2 || r.Checks["crash"] < 1 {
		t.Errorf("checked slots %v: want at least 50 burst, 2 fail, 1 crash", r.Checks)
	}
	b := r.Baseline
	if b.Keys != 50 || b.Won != 50 || b.SequentialCycles <= 0 || b.PipelinedClaims <= 0 {
		t.Errorf("baseline did not run: %+v", b)
	}
	bu := r.Burst
	// Each slot is claimed by its preferred claimant, and by the other
	// replica only if it was not told in time that the slot was taken.
	if bu.SlotTime == "" || bu.StartDelay.N != 50 || bu.ClaimAnswer.N < 50 || bu.ClaimAnswer.N > 100 || bu.ClaimsPerS <= 0 || bu.Ratio <= 0 {
		t.Errorf("burst: want 50 starts and 50 to 100 first claims measured: %+v", bu)
	}
	// On the server each slot costs at least a claim and a complete
	// (their inner calls count); on the client, fused script
	// calls carry many slots each, and pipelines many commands, so the
	// client's commands are only bounded by the server's, and its round
	// trips by its commands.
	if bu.ServerCmdsPerSlot < 3 || bu.ClientCmdsPerSlot <= 0 || bu.ClientCmdsPerSlot > bu.ServerCmdsPerSlot ||
		bu.ClientTripsPerSlot <= 0 || bu.ClientTripsPerSlot > bu.ClientCmdsPerSlot {
		t.Errorf("commands per slot: server %.2f, client %.2f round trips and %.2f commands; want ≥ 3 on the server, and 0 < round trips ≤ client commands ≤ server commands",
			bu.ServerCmdsPerSlot, bu.ClientTripsPerSlot, bu.ClientCmdsPerSlot)
	}
	// 50 tasks' series are some 130 KiB of text: a scrape that read less
	// lost the per-task families.
	if r.Scrapes.N == 0 || r.Scrapes.MeanKiB < 100 {
		t.Errorf("scrapes: %d, %.0f KiB each; want some, each with every task's series", r.Scrapes.N, r.Scrapes.MeanKiB)
	}
	if r.Failure.N != 2 {
		t.Errorf("failure handoff measured %d times, want 2", r.Failure.N)
	}
	if r.Crash.Killed == "" || r.Crash.Takeover.N != 1 {
		t.Errorf("crash takeover: killed %q, measured %d times; want one", r.Crash.Killed, r.Crash.Takeover.N)
	}
	killed := 0
	for _, rep := range r.Replicas {
		if rep.PeakRSSMB <= 0 {
			t.Errorf("replica %s: no peak RSS", rep.ID)
		}
		if rep.Killed {
			killed++
		}
	}
	if len(r.Replicas) != 2 || killed != 1 || len(r.RSSSamples) == 0 {
		t.Errorf("replicas %+v (want 2, one killed), %d RSS samples", r.Replicas, len(r.RSSSamples))
	}
}

// sustainedReport is the part of the load tool's -rate -json report this
// test reads.
type sustainedReport struct {
	Config struct {
		Replicas int    `json:"replicas"`
		Rate     int    `json:"rate"`
		Plugin   string `json:"plugin"`
	} `json:"config"`
	Baseline struct {
		Keys            int     `json:"keys"`
		Won             int     `json:"won"`
		PipelinedClaims float64 `json:"pipelined_claims_per_s"`
	} `json:"baseline"`
	Sustained struct {
		WindowS            float64            `json:"window_s"`
		SlotsPerS          float64            `json:"slots_per_s"`
		Expected           int                `json:"slots_expected"`
		Executed           int                `json:"slots_executed"`
		Missed             int                `json:"slots_missed"`
		Duplicates         int                `json:"duplicates"`
		StartDelay         latency            `json:"start_delay"`
		HistoryNotRecorded *int               `json:"history_not_recorded"`
		RedisCPU           float64            `json:"redis_cpu_s"`
		RedisCPUPerSlot    float64            `json:"redis_cpu_us_per_slot"`
		RedisCmdsPerSlot   float64            `json:"redis_commands_per_slot"`
		RedisCmds          map[string]float64 `json:"redis_commands_per_slot_by_name"`
		LuaCounted         bool               `json:"lua_calls_counted_in_commandstats"`
		ReplicaCPU         float64            `json:"replica_cpu_s"`
		ReplicaCPUPerSlot  float64            `json:"replica_cpu_us_per_slot"`
		ClientTripsPerSlot float64            `json:"client_round_trips_per_slot"`
		PeakRSSMB          float64            `json:"peak_rss_mb"`
		Sink               *struct {
			Requests    int64 `json:"requests"`
			Connections int64 `json:"connections"`
			Malformed   int64 `json:"malformed"`
		} `json:"sink"`
	} `json:"sustained"`
	Replicas []struct {
		ID        string  `json:"id"`
		PeakRSSMB float64 `json:"peak_mb"`
		WindowCPU float64 `json:"window_cpu_s"`
	} `json:"replicas"`
	Checks     map[string]int `json:"checks"`
	Violations []string       `json:"violations"`
}

// The load tool's sustained mode (-rate) runs small with each plugin so
// that it cannot rot: three replicas, 150 tasks due every second, a
// 3-second window. Correctness only, no timing: every slot of the window
// ran exactly once, no history append was lost, and every figure of the
// report was measured.
//
// Not parallel: 150 slots a second on race-built replicas need the
// machine's cores; beside three other tests on 2 busy cores they missed
// slots.
func TestLoadToolSustained(t *testing.T) {
	redisServer := redistest.Binary(t)
	// Built with -race: the tool's sink and the replicas run concurrently.
	bin := built(t, "./cmd/slotd-load", "-race")
	const rate, window = 150, 3
	for _, plugin := range []string{"noop", "http"} {
		t.Run(plugin, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var stdout, stderr bytes.Buffer
			cmd := exec.CommandContext(ctx, bin, "-rate", fmt.Sprint(rate), "-duration", fmt.Sprintf("%ds", window),
				"-warmup", "1", "-plugin", plugin, "-redis-server", redisServer, "-json")
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("load tool: %v\nstderr:\n%s\nstdout:\n%s", err, stderr.String(), stdout.String())
			}
			var r sustainedReport
			if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
				t.Fatalf("report is not JSON: %v\n%s", err, stdout.String())
			}
			if !strings.Contains(stderr.String(), "sustained "+plugin) {
				t.Errorf("no one-line summary on stderr:\n%s", stderr.String())
			}
			if len(r.Violations) > 0 {
				t.Errorf("violations: %q", r.Violations)
			}
			if r.Config.Replicas != 3 || r.Config.Rate != rate || r.Config.Plugin != plugin {
				t.Errorf("config %+v: want 3 replicas, rate %d, plugin %s", r.Config, rate, plugin)
			}
			if b := r.Baseline; b.Keys != rate || b.Won != rate || b.PipelinedClaims <= 0 {
				t.Errorf("baseline did not run: %+v", b)
			}
			s := r.Sustained
			want := rate * window
			if s.WindowS != window || s.Expected != want || s.Executed != want || s.Missed != 0 || s.Duplicates != 0 {
				t.Errorf("window %v s: %d expected, %d executed, %d missed, %d duplicates; want %d, %d, 0, 0",
					s.WindowS, s.Expected, s.Executed, s.Missed, s.Duplicates, want, want)
			}
			if s.SlotsPerS != rate || s.StartDelay.N != want || s.StartDelay.P50 <= 0 || s.StartDelay.Max < s.StartDelay.P50 {
				t.Errorf("slots/s %v, start delay %+v: want %d/s and %d starts measured", s.SlotsPerS, s.StartDelay, rate, want)
			}
			if r.Checks["window"] != want || r.Checks["tick"] <= want {
				t.Errorf("checked slots %v: want the window's %d and the warm-up's", r.Checks, want)
			}
			if s.HistoryNotRecorded == nil || *s.HistoryNotRecorded != 0 {
				t.Errorf("history not recorded: %v, want a count of 0", s.HistoryNotRecorded)
			}
			// Per slot, Redis runs at least one claim script and the
			// commands it calls (counted: the tool checked that this
			// server counts them); the replicas and Redis spent CPU.
			if !s.LuaCounted || s.RedisCmdsPerSlot < 2 || s.RedisCmds["evalsha"] <= 0 || s.RedisCPU <= 0 || s.RedisCPUPerSlot <= 0 {
				t.Errorf("Redis per slot: %.2f commands (%v), CPU %.3f s, %.1f µs, Lua counted %v",
					s.RedisCmdsPerSlot, s.RedisCmds, s.RedisCPU, s.RedisCPUPerSlot, s.LuaCounted)
			}
			if s.ReplicaCPU <= 0 || s.ReplicaCPUPerSlot <= 0 || s.ClientTripsPerSlot <= 0 {
				t.Errorf("replicas: CPU %.2f s, %.1f µs per slot, %.2f round trips per slot", s.ReplicaCPU, s.ReplicaCPUPerSlot, s.ClientTripsPerSlot)
			}
			if len(r.Replicas) != 3 || s.PeakRSSMB <= 0 {
				t.Errorf("replicas %+v, peak RSS %.1f MB: want 3 with a peak", r.Replicas, s.PeakRSSMB)
			}
			for _, rep := range r.Replicas {
				if rep.PeakRSSMB <= 0 {
					t.Errorf("replica %s: no peak RSS", rep.ID)
				}
			}
			switch sk := s.Sink; {
			case plugin == "noop" && sk != nil:
				t.Errorf("noop run reports a sink: %+v", sk)
			case plugin == "http" && (sk == nil || sk.Requests < int64(want) || sk.Connections < 1 || sk.Malformed != 0):
				t.Errorf("sink %+v: want at least the window's %d requests, a connection, none malformed", sk, want)
			}
		})
	}
}
