package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
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
	bin := filepath.Join(t.TempDir(), "load")
	// Built with -race: the replicas are the real daemon under load.
	build := exec.Command("go", "build", "-race", "-o", bin, "./cmd/slotd-load")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/slotd-load: %v\n%s", err, out)
	}
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
