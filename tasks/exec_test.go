package tasks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"
)

var errTestLeaseLost = errors.New("test: lease lost")

func TestExecParams(t *testing.T) {
	tests := []struct {
		name    string
		params  map[string]any
		wantErr string // substring; "" means the factory succeeds
	}{
		{"minimal", map[string]any{"command": []any{"true"}}, ""},
		{"absolute", map[string]any{"command": []any{"/bin/sh", "-c", "exit 0"}}, ""},
		{"relative with slash is not looked up", map[string]any{"command": []any{"./run.sh"}}, ""},
		{"all params", map[string]any{
			"command": []any{"true"}, "dir": "/", "env": map[string]any{"A": "1"},
			"grace": "1s", "max_output": int64(10),
		}, ""},
		{"nil params", nil, `parameter "command" is required`},
		{"no command", map[string]any{}, `parameter "command" is required`},
		{"misspelt", map[string]any{"comand": []any{"true"}}, `unknown parameter "comand"`},
		{"empty command", map[string]any{"command": []any{}}, `parameter "command" is empty`},
		{"empty program", map[string]any{"command": []any{"", "x"}}, `parameter "command"`},
		{"command as string", map[string]any{"command": "ls -l"}, `parameter "command"`},
		{"command of ints", map[string]any{"command": []any{int64(1)}}, `parameter "command"`},
		{"mixed command", map[string]any{"command": []any{"ls", int64(1)}}, `parameter "command"`},
		{"nested command", map[string]any{"command": []any{[]any{"ls"}}}, `parameter "command"`},
		{"table in command", map[string]any{"command": []any{map[string]any{"a": "b"}}}, `parameter "command"`},
		{"command as table", map[string]any{"command": map[string]any{"a": "b"}}, `parameter "command"`},
		{"NUL in argument", map[string]any{"command": []any{"true", "a\x00b"}}, `parameter "command"`},
		{"not in PATH", map[string]any{"command": []any{"slotd-no-such-program"}}, `"slotd-no-such-program" not found`},
		{"dir not a string", map[string]any{"command": []any{"true"}, "dir": int64(1)}, `parameter "dir"`},
		{"dir missing", map[string]any{"command": []any{"true"}, "dir": "/nonexistent/dir"}, `parameter "dir": "/nonexistent/dir" does not exist`},
		{"dir a file", map[string]any{"command": []any{"true"}, "dir": "/bin/sh"}, `parameter "dir": "/bin/sh" is not a directory`},
		{"env not a table", map[string]any{"command": []any{"true"}, "env": "A=1"}, `parameter "env"`},
		{"env value not a string", map[string]any{"command": []any{"true"}, "env": map[string]any{"A": int64(1)}}, `parameter "env"`},
		{"env name with =", map[string]any{"command": []any{"true"}, "env": map[string]any{"A=B": "1"}}, `parameter "env"`},
		{"env empty name", map[string]any{"command": []any{"true"}, "env": map[string]any{"": "1"}}, `parameter "env"`},
		{"env sets a slot variable", map[string]any{"command": []any{"true"}, "env": map[string]any{"SLOTD_SLOT": "1"}}, `parameter "env": SLOTD_SLOT`},
		{"bad grace", map[string]any{"command": []any{"true"}, "grace": "10"}, `parameter "grace": bad duration "10"`},
		{"negative grace", map[string]any{"command": []any{"true"}, "grace": "-1s"}, `parameter "grace"`},
		{"zero grace", map[string]any{"command": []any{"true"}, "grace": "0s"}, `parameter "grace"`},
		{"zero max_output", map[string]any{"command": []any{"true"}, "max_output": int64(0)}, `parameter "max_output"`},
		{"negative max_output", map[string]any{"command": []any{"true"}, "max_output": int64(-1)}, `parameter "max_output"`},
		{"max_output as string", map[string]any{"command": []any{"true"}, "max_output": "64KiB"}, `parameter "max_output"`},
	}
	f, _ := Lookup("exec")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			task, err := f(tt.params, nil)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("factory: %v", err)
			case tt.wantErr == "" && task == nil:
				t.Fatal("factory returned no task")
			case tt.wantErr != "" && err == nil:
				t.Fatalf("factory succeeded, want error containing %q", tt.wantErr)
			case tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr):
				t.Fatalf("error %q does not contain %q", err, tt.wantErr)
			case err != nil && !strings.HasPrefix(err.Error(), "tasks: exec: "):
				t.Fatalf("error %q lacks the package prefix", err)
			}
		})
	}
}

// newExecTask builds an exec task from params, logging into the returned
// recorder.
func newExecTask(t *testing.T, params map[string]any) (Task, *logRecorder) {
	t.Helper()
	log, rec := newLogRecorder()
	f, _ := Lookup("exec")
	task, err := f(params, log)
	if err != nil {
		t.Fatal(err)
	}
	return task, rec
}

func shell(script string, args ...string) []any {
	cmd := []any{"/bin/sh", "-c", script, "sh"}
	for _, a := range args {
		cmd = append(cmd, a)
	}
	return cmd
}

func testRun() Run {
	return Run{
		Task:     "report",
		Slot:     "2024011514",
		SlotTime: time.Date(2024, 1, 15, 15, 0, 0, 0, time.FixedZone("CET", 3600)),
		Attempt:  2,
		Token:    1705327200002,
		Replica:  "host-a-42",
	}
}

func TestExecSuccess(t *testing.T) {
	task, rec := newExecTask(t, map[string]any{"command": shell("echo hello; echo oops >&2")})
	if err := task.Run(WithRun(context.Background(), testRun())); err != nil {
		t.Fatalf("Run: %v", err)
	}
	r := rec.last(t)
	if r["level"] != "INFO" || r["exit_code"] != 0.0 || r["output"] != "hello\noops\n" ||
		r["output_bytes"] != 11.0 || r["slot"] != "2024011514" || r["attempt"] != 2.0 {
		t.Errorf("log record %v", r)
	}
	if _, ok := r["duration"]; !ok {
		t.Errorf("log record %v has no duration", r)
	}
}

func TestExecFailure(t *testing.T) {
	task, rec := newExecTask(t, map[string]any{"command": shell("echo some output; echo more >&2; exit 3")})
	err := task.Run(context.Background())
	var xe *ExitError
	if !errors.As(err, &xe) {
		t.Fatalf("Run = %v, want an *ExitError", err)
	}
	if xe.ExitCode != 3 || xe.Signal != 0 || xe.Cause != nil || xe.Output != "some output\nmore\n" {
		t.Errorf("ExitError %+v", xe)
	}
	for _, s := range []string{"tasks: exec: /bin/sh: ", "exit status 3", "some output", "more"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not contain %q", err, s)
		}
	}
	r := rec.last(t)
	if r["level"] != "WARN" || r["exit_code"] != 3.0 || r["err"] != err.Error() {
		t.Errorf("log record %v", r)
	}
}

func TestExecEnvironment(t *testing.T) {
	t.Setenv("SLOTD_TEST_INHERITED", "from-daemon")
	task, rec := newExecTask(t, map[string]any{
		"command": shell(`printf '%s|' "$SLOTD_TASK" "$SLOTD_SLOT" "$SLOTD_SLOT_TIME" "$SLOTD_ATTEMPT" ` +
			`"$SLOTD_FENCING_TOKEN" "$SLOTD_REPLICA" "$SLOTD_TEST_INHERITED" "$FROM_PARAMS"`),
		"env": map[string]any{"FROM_PARAMS": "a b=c"},
	})
	if err := task.Run(WithRun(context.Background(), testRun())); err != nil {
		t.Fatal(err)
	}
	want := "report|2024011514|2024-01-15T14:00:00Z|2|1705327200002|host-a-42|from-daemon|a b=c|"
	if got := rec.last(t)["output"]; got != want {
		t.Errorf("output %q, want %q", got, want)
	}
}

func TestExecWithoutRun(t *testing.T) {
	task, rec := newExecTask(t, map[string]any{"command": shell(`echo "${SLOTD_SLOT-unset}"`)})
	if err := task.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := rec.last(t)["output"]; got != "unset\n" {
		t.Errorf("output %q, want SLOTD_SLOT unset", got)
	}
}

func TestExecDir(t *testing.T) {
	dir := t.TempDir()
	task, rec := newExecTask(t, map[string]any{
		"command": []any{"./script"},
		"dir":     dir,
	})
	if err := os.WriteFile(filepath.Join(dir, "script"), []byte("#!/bin/sh\n/bin/pwd -P; echo \"$PWD\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := task.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := rec.last(t)["output"], real+"\n"+dir+"\n"; got != want {
		t.Errorf("output %q, want %q", got, want)
	}
}

// A program or a dir that is gone when the attempt starts (the dir is
// checked at load, but may be removed after) fails the attempt at start.
func TestExecStartFailure(t *testing.T) {
	gone := t.TempDir()
	for name, params := range map[string]map[string]any{
		"missing program": {"command": []any{"/nonexistent/program"}},
		"missing dir":     {"command": []any{"true"}, "dir": gone},
	} {
		t.Run(name, func(t *testing.T) {
			task, _ := newExecTask(t, params)
			if params["dir"] != nil {
				if err := os.RemoveAll(gone); err != nil {
					t.Fatal(err)
				}
			}
			err := task.Run(context.Background())
			if err == nil || !strings.Contains(err.Error(), "tasks: exec: start ") {
				t.Errorf("Run = %v, want a start error", err)
			}
		})
	}
}

func TestExecAlreadyCancelled(t *testing.T) {
	dir := t.TempDir()
	task, _ := newExecTask(t, map[string]any{"command": shell(`touch "$1"`, filepath.Join(dir, "ran"))})
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errTestLeaseLost)
	if err := task.Run(ctx); !errors.Is(err, errTestLeaseLost) {
		t.Errorf("Run = %v, want %v", err, errTestLeaseLost)
	}
	if _, err := os.Stat(filepath.Join(dir, "ran")); err == nil {
		t.Error("the command ran")
	}
}

// TestExecTimeout checks that a cancelled command gets SIGTERM first: sleep
// dies of it at once, long before the grace is up.
func TestExecTimeout(t *testing.T) {
	task, _ := newExecTask(t, map[string]any{"command": []any{"sleep", "100"}, "grace": "1m"})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := task.Run(ctx)
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("Run took %v", d)
	}
	var xe *ExitError
	if !errors.As(err, &xe) || xe.Signal != syscall.SIGTERM || xe.ExitCode != -1 {
		t.Fatalf("Run = %#v, want an ExitError for SIGTERM", err)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Run = %v, want it to wrap context.DeadlineExceeded", err)
	}
}

// TestExecCleanExitOnCancel checks that a command that exits 0 on SIGTERM
// has still failed: its attempt was cut short.
func TestExecCleanExitOnCancel(t *testing.T) {
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	task, _ := newExecTask(t, map[string]any{
		"command": shell(`trap 'echo got TERM; exit 0' TERM; touch "$1"; while :; do sleep 0.05; done`, ready),
	})
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	done := make(chan error, 1)
	go func() { done <- task.Run(ctx) }()
	waitFor(t, 10*time.Second, "the command to start", func() bool { return exists(ready) })
	cancel(errTestLeaseLost)

	err := <-done
	var xe *ExitError
	if !errors.As(err, &xe) || xe.ExitCode != 0 || !strings.Contains(xe.Output, "got TERM") {
		t.Fatalf("Run = %v, want an ExitError with exit status 0 after SIGTERM", err)
	}
	if !errors.Is(err, errTestLeaseLost) {
		t.Errorf("Run = %v, want it to wrap the cancel cause", err)
	}
}

// TestExecKillsGroup checks that a process group that ignores SIGTERM is
// killed, grandchildren included, once the grace is up.
func TestExecKillsGroup(t *testing.T) {
	const grace = 200 * time.Millisecond
	pidFile := filepath.Join(t.TempDir(), "pid")
	task, _ := newExecTask(t, map[string]any{
		"command": shell(`trap '' TERM; sleep 100 & echo $! > "$1.tmp"; mv "$1.tmp" "$1"; wait`, pidFile),
		"grace":   grace.String(),
	})
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	done := make(chan error, 1)
	go func() { done <- task.Run(ctx) }()
	waitFor(t, 10*time.Second, "the grandchild to start", func() bool { return exists(pidFile) })
	pid := readPid(t, pidFile)
	t.Cleanup(func() { killIfRunning(pid) })
	if processGone(pid) {
		t.Fatalf("grandchild %d is not running", pid)
	}

	start := time.Now()
	cancel(errTestLeaseLost)
	var err error
	select {
	case err = <-done:
	case <-time.After(grace + 10*time.Second):
		t.Fatal("Run did not return after the grace")
	}
	if d := time.Since(start); d < grace {
		t.Errorf("Run returned after %v, before the grace of %v", d, grace)
	}
	var xe *ExitError
	if !errors.As(err, &xe) || xe.Signal != syscall.SIGKILL {
		t.Errorf("Run = %v, want an ExitError for SIGKILL", err)
	}
	if !errors.Is(err, errTestLeaseLost) {
		t.Errorf("Run = %v, want it to wrap the cancel cause", err)
	}
	waitFor(t, 5*time.Second, fmt.Sprintf("grandchild %d to die", pid), func() bool { return processGone(pid) })
}

// TestExecLeftovers checks that Run neither waits for nor leaves behind a
// background process that holds the output pipe after the command exits.
func TestExecLeftovers(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	task, rec := newExecTask(t, map[string]any{
		"command": shell(`sleep 100 & echo $! > "$1"; echo done`, pidFile),
	})
	start := time.Now()
	if err := task.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("Run took %v", d)
	}
	if got := rec.last(t)["output"]; got != "done\n" {
		t.Errorf("output %q", got)
	}
	pid := readPid(t, pidFile)
	t.Cleanup(func() { killIfRunning(pid) })
	waitFor(t, 5*time.Second, fmt.Sprintf("background process %d to die", pid), func() bool { return processGone(pid) })
}

func TestExecHugeOutput(t *testing.T) {
	task, rec := newExecTask(t, map[string]any{
		"command": shell(`head -c 10000000 /dev/zero | tr '\0' x; echo; echo END; exit 1`),
	})
	err := task.Run(context.Background())
	var xe *ExitError
	if !errors.As(err, &xe) {
		t.Fatalf("Run = %v", err)
	}
	const total = 10000000 + len("\nEND\n")
	marker := fmt.Sprintf("...[%d bytes omitted]...", total-DefaultExecMaxOutput)
	want := strings.Repeat("x", DefaultExecMaxOutput/2) + marker +
		strings.Repeat("x", DefaultExecMaxOutput/2-len("\nEND\n")) + "\nEND\n"
	if xe.Output != want {
		t.Errorf("Output is %d bytes, want %d with %q", len(xe.Output), len(want), marker)
	}
	if n := len(err.Error()); n > 2*errTailMax {
		t.Errorf("error is %d bytes", n)
	}
	if !strings.HasSuffix(err.Error(), `END"`) {
		t.Errorf("error %q... does not end with the output's tail", err.Error()[:100])
	}
	if r := rec.last(t); r["output"] != want || r["output_bytes"] != float64(total) {
		t.Errorf("log has output of %d bytes, output_bytes %v", len(r["output"].(string)), r["output_bytes"])
	}
}

func TestExecInvalidUTF8(t *testing.T) {
	task, rec := newExecTask(t, map[string]any{
		"command":    shell(`printf '\377\376ok\n\342\202'; exit 1`),
		"max_output": int64(5), // cut inside the output, too
	})
	err := task.Run(context.Background())
	var xe *ExitError
	if !errors.As(err, &xe) {
		t.Fatalf("Run = %v", err)
	}
	if !utf8.ValidString(xe.Output) || !utf8.ValidString(err.Error()) {
		t.Errorf("invalid UTF-8 in %q / %q", xe.Output, err)
	}
	if r := rec.last(t); r["output"] != xe.Output {
		t.Errorf("logged output %q, want %q", r["output"], xe.Output)
	}
}

func TestCapture(t *testing.T) {
	// want keeps the first max/2 and the last max-max/2 bytes of s.
	want := func(s string, max int) string {
		if len(s) <= max {
			return s
		}
		h := max / 2
		return s[:h] + fmt.Sprintf("...[%d bytes omitted]...", len(s)-max) + s[len(s)-(max-h):]
	}
	inputs := []string{"", "a", "0123456789", "0123456789abcdefghijklmnopqrstuvwxyz"}
	for _, in := range inputs {
		for _, max := range []int{1, 2, 3, 10, 11, 64} {
			for _, chunk := range []int{1, 3, 7, 1000} {
				c := newCapture(max)
				for p := []byte(in); len(p) > 0; {
					n := min(chunk, len(p))
					if k, err := c.Write(p[:n]); k != n || err != nil {
						t.Fatalf("Write = %d, %v", k, err)
					}
					p = p[n:]
				}
				if got, w := c.String(), want(in, max); got != w {
					t.Errorf("capture(%q, max %d, chunks of %d) = %q, want %q", in, max, chunk, got, w)
				}
			}
		}
	}
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func readPid(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// killIfRunning kills a process that a failed test left behind.
func killIfRunning(pid int) {
	if !processGone(pid) {
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

// processGone reports whether pid has exited. A zombie counts as gone:
// whether anyone reaps it is up to its new parent, not slotd.
func processGone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// The state follows the command name, which is in parentheses.
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] == 'Z'
}

// Every problem of an exec task's params is reported, each with its
// parameter and value: a misspelt parameter used to hide a command that is
// not installed, and the first bad key hid the others.
func TestExecParamsReportsEveryError(t *testing.T) {
	f, _ := Lookup("exec")
	_, err := f(map[string]any{
		"command":    []any{"slotd-no-such-program"},
		"comand":     []any{"true"},
		"dir":        "/nonexistent/dir",
		"grace":      "10",
		"max_output": "64KiB",
		"env":        map[string]any{"SLOTD_SLOT": "1"},
	}, nil)
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{
		`unknown parameter "comand"`,
		`parameter "command": "slotd-no-such-program" not found`,
		`parameter "dir": "/nonexistent/dir" does not exist`,
		`parameter "grace": bad duration "10"`,
		`parameter "max_output"`,
		`parameter "env": SLOTD_SLOT is set by slotd`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not report %q:\n%v", want, err)
		}
	}
	for _, line := range strings.Split(err.Error(), "\n") {
		if !strings.HasPrefix(line, "tasks: exec: ") {
			t.Errorf("line %q lacks the package prefix", line)
		}
	}
	_, again := f(map[string]any{"command": []any{"slotd-no-such-program"}, "comand": 1, "dir": "/nonexistent/dir"}, nil)
	for range 5 {
		if _, e := f(map[string]any{"command": []any{"slotd-no-such-program"}, "comand": 1, "dir": "/nonexistent/dir"}, nil); e.Error() != again.Error() {
			t.Fatalf("errors in another order:\n%v\n%v", again, e)
		}
	}
}

// A cancel whose cause carries ErrNoGrace (the lease is lost: a peer may
// claim the slot once its margin runs out) kills the command's tree at
// once, with no SIGTERM and no grace, even a tree that ignores SIGTERM
// under a grace of a minute.
func TestExecNoGraceKillsAtOnce(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	task, _ := newExecTask(t, map[string]any{
		"command": shell(`trap '' TERM; sleep 100 & echo $! > "$1.tmp"; mv "$1.tmp" "$1"; wait`, pidFile),
		"grace":   "1m",
	})
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	done := make(chan error, 1)
	go func() { done <- task.Run(ctx) }()
	waitFor(t, 10*time.Second, "the grandchild to start", func() bool { return exists(pidFile) })
	pid := readPid(t, pidFile)
	t.Cleanup(func() { killIfRunning(pid) })

	cause := fmt.Errorf("%w (%w)", errTestLeaseLost, ErrNoGrace)
	cancel(cause)
	select {
	case err := <-done:
		var xe *ExitError
		if !errors.As(err, &xe) || xe.Signal != syscall.SIGKILL {
			t.Errorf("Run = %v, want an ExitError for SIGKILL", err)
		}
		if !errors.Is(err, ErrNoGrace) {
			t.Errorf("Run = %v, want it to wrap the cause", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run still going 10s after a no-grace cancel (grace 1m): the grace was waited for")
	}
	waitFor(t, 5*time.Second, "the grandchild to be gone", func() bool { return processGone(pid) })
}

// SLOTD_STORE_REVISION is set only by stores that order every write.
func TestExecStoreRevision(t *testing.T) {
	task, rec := newExecTask(t, map[string]any{"command": shell(`echo "${SLOTD_STORE_REVISION-unset}"`)})
	r := testRun()
	if err := task.Run(WithRun(context.Background(), r)); err != nil {
		t.Fatal(err)
	}
	if got := rec.last(t)["output"]; got != "unset\n" {
		t.Errorf("without a revision: output %q, want unset", got)
	}
	r.Revision = 987654
	if err := task.Run(WithRun(context.Background(), r)); err != nil {
		t.Fatal(err)
	}
	if got := rec.last(t)["output"]; got != "987654\n" {
		t.Errorf("with revision 987654: output %q", got)
	}
}
