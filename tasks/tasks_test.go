package tasks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"
)

func TestRegisterPanics(t *testing.T) {
	nop := func(map[string]any, *slog.Logger) (Task, error) { return nil, nil }
	if _, ok := Lookup("test-register-once"); !ok { // -count=N runs this again
		Register("test-register-once", nop)
	}
	tests := []struct {
		name    string
		plugin  string
		factory Factory
	}{
		{"empty name", "", nop},
		{"nil factory", "test-register-nil", nil},
		{"duplicate", "test-register-once", nop},
		{"duplicate of a built-in", "exec", nop},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Errorf("Register(%q) did not panic", tt.plugin)
				}
			}()
			Register(tt.plugin, tt.factory)
		})
	}
	if _, ok := Lookup("test-register-nil"); ok {
		t.Error("a nil factory was registered")
	}
}

func TestLookupAndPlugins(t *testing.T) {
	for _, name := range []string{"exec", "http"} {
		if f, ok := Lookup(name); !ok || f == nil {
			t.Errorf("Lookup(%q) = %v, %v", name, f, ok)
		}
		if !slices.Contains(Plugins(), name) {
			t.Errorf("Plugins() = %v, missing %q", Plugins(), name)
		}
	}
	if _, ok := Lookup("no-such-plugin"); ok {
		t.Error("Lookup of an unknown plugin succeeded")
	}
	if !slices.IsSorted(Plugins()) {
		t.Errorf("Plugins() = %v, not sorted", Plugins())
	}
}

func ExampleWithRun() {
	ctx := WithRun(context.Background(), Run{
		Task:     "hourly-report",
		Slot:     "2024011514",
		SlotTime: time.Date(2024, 1, 15, 14, 0, 0, 0, time.UTC),
		Attempt:  2,
		Token:    1705327200002,
		Replica:  "host-a-4242",
	})

	report := TaskFunc(func(ctx context.Context) error {
		r, ok := RunFrom(ctx)
		if !ok {
			return errors.New("report: no attempt in the context")
		}
		// The work is for the slot time, whenever the task starts.
		fmt.Println(r.Task, r.SlotTime.Format(time.RFC3339), r.Attempt, r.Token)
		return nil
	})
	fmt.Println(report.Run(ctx))
	// Output:
	// hourly-report 2024-01-15T14:00:00Z 2 1705327200002
	// <nil>
}

// logRecorder is a JSON slog handler's output, for checking what a task logs.
type logRecorder struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func newLogRecorder() (*slog.Logger, *logRecorder) {
	r := &logRecorder{}
	return slog.New(slog.NewJSONHandler(r, &slog.HandlerOptions{Level: slog.LevelDebug})), r
}

func (r *logRecorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.buf.Write(p)
}

// records decodes every logged line; a line that is not JSON fails the test.
func (r *logRecorder) records(t *testing.T) []map[string]any {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	var recs []map[string]any
	dec := json.NewDecoder(bytes.NewReader(r.buf.Bytes()))
	for dec.More() {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			t.Fatalf("log is not JSON: %v\n%s", err, r.buf.String())
		}
		recs = append(recs, m)
	}
	return recs
}

// last returns the last record, failing the test if there is none.
func (r *logRecorder) last(t *testing.T) map[string]any {
	t.Helper()
	recs := r.records(t)
	if len(recs) == 0 {
		t.Fatal("nothing was logged")
	}
	return recs[len(recs)-1]
}
