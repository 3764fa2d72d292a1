package main

import (
	"encoding/json"
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

// TestMain runs this test binary as a replica when the tool starts it as
// one (startReplica runs its own executable with -child).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "-child" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// A short sustained run on each store the tool starts: every slot of the
// window runs once, and the report carries the store's CPU and the
// replicas' figures. One store's tasks are due every 2 s (a burst each
// time), the others' every second.
func TestSmokeEveryStore(t *testing.T) {
	if testing.Short() {
		t.Skip("starts stores and replica processes")
	}
	for _, tc := range []struct{ store, every string }{
		{storeRedis, "1s"}, {storeCluster, "2s"}, {storeEtcd, "1s"}, {storeZooKeeper, "2s"},
	} {
		t.Run(tc.store, func(t *testing.T) {
			var stdout, stderr strings.Builder
			code := run([]string{"-store", tc.store, "-rate", "20", "-every", tc.every, "-duration", "4s", "-warmup", "1", "-json", "-sample", "1s"}, &stdout, &stderr)
			if code != 0 {
				t.Fatalf("exit %d; stderr:\n%s", code, stderr.String())
			}
			var rep sustainedRun
			if err := json.Unmarshal([]byte(stdout.String()), &rep); err != nil {
				t.Fatalf("report: %v\n%s", err, stdout.String())
			}
			every, _ := time.ParseDuration(tc.every)
			s := rep.Sustained
			want := 20 * int(4*time.Second/every)
			if rep.Config.Store != tc.store || rep.Config.EveryS != int(every/time.Second) {
				t.Errorf("config %+v; want store %s every %v", rep.Config, tc.store, every)
			}
			if s.Expected != want || s.Executed != want || s.Duplicates != 0 || len(rep.Violations) != 0 {
				t.Errorf("expected %d, executed %d, duplicates %d, violations %q; want %d, %d, 0, none",
					s.Expected, s.Executed, s.Duplicates, rep.Violations, want, want)
			}
			if counted := tc.store != storeCluster; counted && s.RedisCmdsPerSlot <= 0 {
				t.Errorf("store requests per slot %.2f; want > 0 (Redis's commands, ZooKeeper's packets, etcd's gRPC calls)", s.RedisCmdsPerSlot)
			}
			if s.RedisCPU <= 0 || s.ReplicaCPU <= 0 || s.PeakRSSMB <= 0 || s.StartDelay.N != want {
				t.Errorf("store CPU %.3f s, replicas' CPU %.3f s, peak RSS %.0f MB, start delays %d: want all > 0 and %d delays",
					s.RedisCPU, s.ReplicaCPU, s.PeakRSSMB, s.StartDelay.N, want)
			}
		})
	}
}

// -every: whole seconds dividing a minute, and a window of whole periods.
func TestEveryFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // in the error
	}{
		{[]string{"-rate", "10", "-every", "1500ms"}, "-every 1.5s"},
		{[]string{"-rate", "10", "-every", "7s", "-duration", "7s"}, "-every 7s"},
		{[]string{"-rate", "10", "-every", "10s", "-duration", "15s"}, "-duration 15s: want a whole number of -every (10s)"},
		{[]string{"-rate", "10", "-every", "10s", "-duration", "0s"}, "-duration 0s"},
	} {
		var stderr strings.Builder
		if code := run(tc.args, io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want 2 and %q", tc.args, code, stderr.String(), tc.want)
		}
	}
	o := options{rate: 10, replicas: 3, batch: 256, burstLease: 15 * time.Second, sample: time.Second, plugin: pluginNoop,
		store: storeCluster, every: 10 * time.Second, duration: 20 * time.Second, set: map[string]bool{"rate": true, "duration": true}}
	if err := o.validate(); err != nil {
		t.Errorf("-store cluster -every 10s -duration 20s: %v", err)
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		every time.Duration
		want  time.Time
	}{
		{time.Second, at}, {10 * time.Second, at.Add(5 * time.Second)}, {5 * time.Second, at}, {30 * time.Second, at.Add(25 * time.Second)},
	} {
		if got := nextDue(at, tc.every); !got.Equal(tc.want) {
			t.Errorf("nextDue(%v, %v) = %v; want %v", at, tc.every, got, tc.want)
		}
	}
}

// readLogs counts a log line of any length: an error naming thousands of
// keys once ended the report.
func TestReadLogsLongLine(t *testing.T) {
	dir := t.TempDir()
	long := `{"level":"WARN","msg":"claims failed","err":"` + strings.Repeat("k", 3<<20) + `"}`
	log := long + "\n" + `{"level":"WARN","msg":"run history not recorded"}` + "\nnot json\n" + `{"level":"INFO","msg":"started"}`
	if err := os.WriteFile(dir+"/r1.log", []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	var rep sustainedRun
	if err := rep.readLogs(dir, []string{"r1"}); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"claims failed": 1, historyNotRecorded: 1, "(not a JSON log line)": 1}
	if len(rep.Sustained.LogWarnings) != len(want) || rep.Sustained.HistoryNotRecorded != 1 {
		t.Fatalf("warnings %v; want %v", rep.Sustained.LogWarnings, want)
	}
	for k, n := range want {
		if rep.Sustained.LogWarnings[k] != n {
			t.Errorf("warnings %v; want %v", rep.Sustained.LogWarnings, want)
		}
	}
}
