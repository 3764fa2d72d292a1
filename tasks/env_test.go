package tasks

import (
	"context"
	"testing"
)

// TestDropEnv checks that a dropped variable of the daemon's environment
// does not reach a task, whether it runs under the supervisor or directly,
// that the others still do, and that a task's env parameter can still set
// a dropped name.
func TestDropEnv(t *testing.T) {
	t.Setenv("SLOTD_TEST_REDIS_URL", "redis://:s3cret@127.0.0.1:6379")
	t.Setenv("SLOTD_TEST_DROPPED", "also secret")
	t.Setenv("SLOTD_TEST_SET_BY_TASK", "from the daemon")
	t.Setenv("SLOTD_TEST_KEPT", "kept")
	DropEnv("SLOTD_TEST_REDIS_URL")
	DropEnv("SLOTD_TEST_DROPPED", "SLOTD_TEST_SET_BY_TASK", "")

	for name, start := range map[string]func(command) (process, error){
		"supervised": startProcess,
		"direct":     startDirect,
	} {
		t.Run(name, func(t *testing.T) {
			task, rec := newExecTask(t, map[string]any{
				"command": shell(`printf '%s|' "${SLOTD_TEST_REDIS_URL-unset}" "${SLOTD_TEST_DROPPED-unset}" ` +
					`"${SLOTD_TEST_SET_BY_TASK-unset}" "${SLOTD_TEST_KEPT-unset}"; env | grep -c s3cret || true`),
				"env": map[string]any{"SLOTD_TEST_SET_BY_TASK": "from the task"},
			})
			task.(*execTask).start = start
			err := task.Run(context.Background())
			want := "unset|unset|from the task|kept|0\n"
			if got := rec.last(t)["output"]; got != want || err != nil {
				t.Errorf("output %q (%v), want %q", got, err, want)
			}
		})
	}
}
