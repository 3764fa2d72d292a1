package greet_test

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/slotd/slotd/tasks"
	_ "github.com/slotd/slotd/tasks/example/greet"
)

func newGreet(t *testing.T, params map[string]any, log *slog.Logger) tasks.Task {
	t.Helper()
	f, ok := tasks.Lookup("greet")
	if !ok {
		t.Fatal("greet is not registered")
	}
	task, err := f(params, log)
	if err != nil {
		t.Fatal(err)
	}
	return task
}

func attempt(n int) context.Context {
	return tasks.WithRun(context.Background(), tasks.Run{
		Task: "hello", Slot: "202401151430", SlotTime: time.Date(2024, 1, 15, 14, 30, 0, 0, time.UTC),
		Attempt: n, Token: 1705329000000 + int64(n), Replica: "r1",
	})
}

func TestGreet(t *testing.T) {
	var out strings.Builder
	log := slog.New(slog.NewTextHandler(&out, nil))
	task := newGreet(t, map[string]any{"greeting": "good morning"}, log)
	kept := tasks.NewOutput(tasks.DefaultOutputTail)
	if err := task.Run(tasks.WithOutput(attempt(1), kept)); err != nil {
		t.Fatal(err)
	}
	if got, want := kept.String(), "good morning (slot 202401151430, attempt 1)\n"; got != want {
		t.Errorf("output %q, want %q", got, want)
	}
	for _, s := range []string{`msg="good morning"`, "slot=202401151430", "fencing_token=1705329000001"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("log %q does not contain %q", out.String(), s)
		}
	}
}

func TestGreetFailAttempts(t *testing.T) {
	task := newGreet(t, map[string]any{"fail_attempts": int64(2)}, nil)
	for n, wantOK := range map[int]bool{1: false, 2: false, 3: true, 4: true} {
		if err := task.Run(attempt(n)); (err == nil) != wantOK {
			t.Errorf("attempt %d: Run = %v", n, err)
		}
	}
	if err := task.Run(context.Background()); err == nil {
		t.Error("Run without an attempt succeeded")
	}
}

func TestGreetParams(t *testing.T) {
	f, _ := tasks.Lookup("greet")
	for _, tt := range []struct {
		params  map[string]any
		wantErr string
	}{
		{map[string]any{"greting": "hi"}, `unknown parameter "greting"`},
		{map[string]any{"greeting": int64(1)}, `parameter "greeting"`},
		{map[string]any{"fail_attempts": "2"}, `parameter "fail_attempts"`},
		{map[string]any{"fail_attempts": int64(-1)}, `parameter "fail_attempts"`},
	} {
		if _, err := f(tt.params, nil); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("factory(%v) = %v, want error containing %q", tt.params, err, tt.wantErr)
		}
	}
}

// A custom binary's plugins are in the registry once their packages are
// imported; slotd then builds each [[task]] from its plugin name and params.
func Example() {
	factory, _ := tasks.Lookup("greet")
	log := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{} // keep the output stable
			}
			return a
		},
	}))
	task, err := factory(map[string]any{"greeting": "hello"}, log.With("task", "hello"))
	if err != nil {
		panic(err)
	}
	ctx := tasks.WithRun(context.Background(), tasks.Run{
		Task:     "hello",
		Slot:     "202401151430",
		SlotTime: time.Date(2024, 1, 15, 14, 30, 0, 0, time.UTC),
		Attempt:  1,
		Token:    1705329000001,
		Replica:  "host-a-4242",
	})
	if err := task.Run(ctx); err != nil {
		panic(err)
	}
	// Output:
	// level=INFO msg=hello task=hello slot=202401151430 attempt=1 fencing_token=1705329000001 replica=host-a-4242
}
