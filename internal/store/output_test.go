package store_test

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/internal/store"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/redislock"
	"github.com/slotd/slotd/scheduler"
	"github.com/slotd/slotd/scheduler/schedule"
	"github.com/slotd/slotd/tasks"
)

// An entry's output is kept as appended (hostile content included: it is
// escaped where shown, not here), bounded to MaxHistoryOutput by its tail;
// an entry without output has none.
func TestHistoryOutput(t *testing.T) {
	hostile := "line 1\n<script>alert(1)</script>\x1b[31mred\x1b[0m\r\n"
	huge := strings.Repeat("y", 2*scheduler.MaxHistoryOutput) + "tail"
	for name, h := range histories(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			for i, out := range []string{hostile, huge, ""} {
				e := entry("2024011514", i+1, "failure", "exit status 1")
				e.Output = out
				if err := h.Append(ctx, "report", e); err != nil {
					t.Fatal(err)
				}
			}
			got, err := h.Recent(ctx, "report", 3)
			if err != nil || len(got) != 3 {
				t.Fatalf("Recent: %v, %v", got, err)
			}
			if got[2].Output != hostile {
				t.Errorf("output %q, want %q", got[2].Output, hostile)
			}
			if o := got[1].Output; len(o) > scheduler.MaxHistoryOutput || !strings.HasPrefix(o, "…y") ||
				!strings.HasSuffix(o, "ytail") || !utf8.ValidString(o) {
				t.Errorf("a %d-byte output is kept as %d bytes", len(huge), len(o))
			}
			if got[0].Output != "" {
				t.Errorf("no output read back as %q", got[0].Output)
			}
		})
	}
}

// An exec task's output tail goes from the attempt, through the engine,
// into the Redis history.
func TestExecOutputInRedisHistory(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	st := redislock.New(rdb, "slotd")
	t.Cleanup(func() { st.Close() })
	hist := store.NewRedisHistory(rdb, "slotd", time.Hour)
	t.Cleanup(hist.Close)

	f, _ := tasks.Lookup("exec")
	job, err := f(map[string]any{"command": []any{"/bin/sh", "-c",
		`i=0; while [ $i -lt 500 ]; do echo "row $i"; i=$((i+1)); done; echo '<script>x</script>' >&2`}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sched, err := schedule.Parse("@every 1s", "")
	if err != nil {
		t.Fatal(err)
	}
	task := scheduler.Task{
		Name: "cmd", Spec: "@every 1s", Plugin: "exec", Params: map[string]any{},
		Policy:  lock.Policy{Lease: 3 * time.Second, DoneTTL: time.Hour, MaxAttempts: 3},
		Timeout: time.Minute, Catchup: scheduler.CatchupNone, Schedule: sched, Job: job,
		OutputTail: 200,
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- scheduler.New([]scheduler.Task{task}, st, scheduler.WithHistory(hist), scheduler.WithReplica("r1")).Run(ctx)
	}()
	defer func() { cancel(); <-done }()

	deadline := time.Now().Add(10 * time.Second)
	for {
		es, err := hist.Recent(context.Background(), "cmd", 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(es) == 1 {
			o := es[0].Output
			if es[0].Outcome != "success" || !strings.HasSuffix(o, "row 499\n<script>x</script>\n") ||
				!strings.HasPrefix(o, "…") || len(o) > 200+len("…") {
				t.Errorf("entry %s with output %q", es[0].Outcome, o)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no attempt recorded within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
