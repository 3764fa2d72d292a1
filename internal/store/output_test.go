package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/redislock"
	"github.com/slotd/slotd/scheduler"
	"github.com/slotd/slotd/scheduler/schedule"
	"github.com/slotd/slotd/tasks"
)

// An exec task's output tail goes from the attempt, through the engine,
// into the Redis history.
func TestExecOutputInRedisHistory(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	st := redislock.New(rdb, "slotd")
	t.Cleanup(func() { st.Close() })
	hist := redislock.NewHistory(rdb, "slotd", time.Hour)
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
