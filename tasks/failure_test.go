package tasks

import (
	"context"
	"slices"
	"testing"
)

// An on_failure hook's exec environment carries the failure; a NUL in the
// last error or output, which no variable can hold, is dropped rather than
// failing the hook's start.
func TestFailureEnv(t *testing.T) {
	ctx := WithFailure(WithRun(context.Background(), Run{Task: "t", Slot: "2024011514"}),
		Failure{Kind: FailureExhausted, Attempts: 3, LastError: "exit\x00 status 1", Output: "a\x00b"})
	env := (&execTask{}).environ(ctx, nil)
	for _, want := range []string{"SLOTD_FAILURE=exhausted", "SLOTD_ATTEMPTS=3", "SLOTD_LAST_ERROR=exit status 1", "SLOTD_OUTPUT=ab", "SLOTD_TASK=t"} {
		if !slices.Contains(env, want) {
			t.Errorf("environment lacks %q: %q", want, env)
		}
	}
	if f, ok := FailureFrom(WithRun(context.Background(), Run{})); ok {
		t.Errorf("an attempt's context carries a failure: %+v", f)
	}
}
