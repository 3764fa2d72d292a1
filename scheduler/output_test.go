package scheduler_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/slotd/slotd/lock/memlock"
	"github.com/slotd/slotd/scheduler"
	"github.com/slotd/slotd/scheduler/history"
	"github.com/slotd/slotd/tasks"
)

// Each attempt's entry keeps the tail of what its task wrote to
// tasks.OutputFrom, bounded by the task's OutputTail; a task with
// OutputTail 0 keeps none.
func TestAttemptOutputInHistory(t *testing.T) {
	store := memlock.New(nil)
	hist := history.NewMemory(0)
	chatty := tasks.TaskFunc(func(ctx context.Context) error {
		out := tasks.OutputFrom(ctx)
		for range 1000 {
			out.WriteString("0123456789")
		}
		out.WriteString("<script>alert(1)</script> the end\n")
		if r, _ := tasks.RunFrom(ctx); r.Attempt == 1 {
			return errors.New("first attempt fails")
		}
		return nil
	})
	kept := testTask(t, "kept", "@every 1s", chatty, func(tk *scheduler.Task) { tk.OutputTail = 64 })
	none := testTask(t, "none", "@every 1s", chatty, nil)
	startReplica(t, "r1", store, time.Second, []scheduler.Task{kept, none}, scheduler.WithHistory(hist))

	es := awaitHistory(t, hist, "kept", "a failure and a success", func(es []scheduler.HistoryEntry) bool {
		var failed, ok bool
		for _, e := range es {
			failed = failed || e.Outcome == "failure"
			ok = ok || e.Outcome == "success"
		}
		return failed && ok
	})
	for _, e := range es {
		if !strings.HasSuffix(e.Output, "<script>alert(1)</script> the end\n") || !strings.HasPrefix(e.Output, "…") ||
			len(e.Output) > 64+len("…") {
			t.Errorf("%s attempt %d: output %q, want the last 64 bytes", e.Outcome, e.Attempt, e.Output)
		}
	}
	es = awaitHistory(t, hist, "none", "an attempt", func(es []scheduler.HistoryEntry) bool { return len(es) > 0 })
	for _, e := range es {
		if e.Output != "" {
			t.Errorf("task with OutputTail 0 kept output %q", e.Output)
		}
	}
}

// The exec plugin's output reaches the history: the tail of the capture it
// also logs, bounded by OutputTail however much the command prints.
func TestExecOutputInHistory(t *testing.T) {
	f, _ := tasks.Lookup("exec")
	job, err := f(map[string]any{"command": []any{"/bin/sh", "-c",
		`head -c 100000 /dev/zero | tr '\0' x; echo; echo "<b>done</b> $SLOTD_ATTEMPT"; exit 1`}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	task := testTask(t, "cmd", "@every 1s", job, func(tk *scheduler.Task) {
		tk.OutputTail = tasks.DefaultOutputTail
		tk.MaxAttempts = 1
	})
	hist := history.NewMemory(0)
	startReplica(t, "r1", memlock.New(nil), time.Second, []scheduler.Task{task}, scheduler.WithHistory(hist))
	es := awaitHistory(t, hist, "cmd", "a failed attempt", func(es []scheduler.HistoryEntry) bool { return len(es) > 0 })
	e := es[0]
	if e.Outcome != "failure" || !strings.HasSuffix(e.Output, "x\n<b>done</b> 1\n") ||
		len(e.Output) > tasks.DefaultOutputTail+len("…") || len(e.Output) < tasks.DefaultOutputTail {
		t.Errorf("entry %s, output of %d bytes ending %q", e.Outcome, len(e.Output), e.Output[max(len(e.Output)-40, 0):])
	}
}

// Every History bounds an entry's output to history.MaxOutput, keeping
// its tail.
func TestTruncateHistoryOutput(t *testing.T) {
	long := strings.Repeat("é", history.MaxOutput) + "end"
	got := history.TruncateOutput(long)
	if len(got) > history.MaxOutput || !strings.HasPrefix(got, "…é") || !strings.HasSuffix(got, "éend") {
		t.Errorf("%d bytes, %q...%q", len(got), got[:10], got[len(got)-10:])
	}
	if got := history.TruncateOutput("a\xffb"); got != "a\uFFFDb" {
		t.Errorf("invalid UTF-8 kept as %q", got)
	}
	if got := history.TruncateOutput("short"); got != "short" {
		t.Errorf("short output changed to %q", got)
	}
}
