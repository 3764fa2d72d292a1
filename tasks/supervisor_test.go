//go:build linux

package tasks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSuperviseDispatch checks that a binary linking this package — here
// the test binary — becomes the supervisor when started as one, before its
// own main runs: a test binary that ran its tests instead would start
// supervisors of its own, without end. Started by hand (no command, no
// pipes), the supervisor refuses at once and starts nothing.
func TestSuperviseDispatch(t *testing.T) {
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for name, args := range map[string][]string{
		"no command": {superviseArg},
		"no pipes":   {superviseArg, "/bin/sh", "sh", "-c", "echo ran"},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, args...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != exitSuperviseUsage {
				t.Fatalf("%s %v: %v, want exit status %d; stdout %q, stderr %q",
					bin, args, err, exitSuperviseUsage, stdout.String(), stderr.String())
			}
			if stdout.Len() != 0 || !strings.Contains(stderr.String(), "internal supervisor of exec tasks") {
				t.Errorf("stdout %q, stderr %q", stdout.String(), stderr.String())
			}
		})
	}
}

// TestExecRunsUnderSupervisor checks that the command's parent is the
// supervisor, not the daemon, and that it still sees exactly the
// environment and directory it would see without one.
func TestExecRunsUnderSupervisor(t *testing.T) {
	dir := t.TempDir()
	task, rec := newExecTask(t, map[string]any{
		"command": shell(`cat /proc/$PPID/cmdline | tr '\0' ' '; echo; pwd; env | sort`),
		"dir":     dir,
	})
	if err := task.Run(WithRun(context.Background(), testRun())); err != nil {
		t.Fatal(err)
	}
	first, rest, _ := strings.Cut(rec.last(t)["output"].(string), "\n")
	if !strings.Contains(first, " "+superviseArg+" /bin/sh /bin/sh -c ") {
		t.Errorf("parent's command line %q, want the supervisor's", first)
	}
	pwd, env, _ := strings.Cut(rest, "\n")
	if pwd != dir {
		t.Errorf("pwd %q, want %q", pwd, dir)
	}

	direct, rec2 := newExecTask(t, map[string]any{"command": shell(`env | sort`), "dir": dir})
	direct.(*execTask).start = startDirect
	if err := direct.Run(WithRun(context.Background(), testRun())); err != nil {
		t.Fatal(err)
	}
	// The shell sets SHLVL, _ and PPID-derived variables the same way in both.
	if want := rec2.last(t)["output"].(string); env != want {
		t.Errorf("environment under the supervisor:\n%s\nwant, as run directly:\n%s", env, want)
	}
}

// treeScript starts a process tree that leaves the command's process group
// and session: a setsid grandchild, and a double-forked one in its own
// group, each writing its pid into dir, then waits (or exits if asked).
// Both ignore SIGTERM.
func treeScript(dir string, then string) []any {
	return shell(`
trap '' TERM
setsid sh -c 'trap "" TERM; echo $$ > "$1/setsid.tmp"; mv "$1/setsid.tmp" "$1/setsid"; while :; do sleep 0.05; done' sh "$1" &
( sh -c 'trap "" TERM; echo $$ > "$1/orphan.tmp"; mv "$1/orphan.tmp" "$1/orphan"; exec sleep 100' sh "$1" & ) 
while [ ! -e "$1/setsid" ] || [ ! -e "$1/orphan" ]; do sleep 0.01; done
echo started
`+then, dir)
}

// treePids waits for the tree's pids and checks that they run outside
// the command's process group.
func treePids(t *testing.T, dir string) []int {
	t.Helper()
	var pids []int
	for _, name := range []string{"setsid", "orphan"} {
		path := filepath.Join(dir, name)
		waitFor(t, 10*time.Second, name+" to start", func() bool { return exists(path) })
		pid := readPid(t, path)
		t.Cleanup(func() { killIfRunning(pid) })
		if processGone(pid) {
			t.Fatalf("%s %d is not running", name, pid)
		}
		pids = append(pids, pid)
	}
	if sid, _ := getsid(pids[0]); sid != pids[0] {
		t.Fatalf("setsid grandchild %d: session %d, want its own", pids[0], sid)
	}
	return pids
}

func getsid(pid int) (int, error) {
	sid, _, e := syscall.RawSyscall(syscall.SYS_GETSID, uintptr(pid), 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(sid), nil
}

// assertGone checks that none of pids is left — not even a zombie: the
// supervisor reaps its descendants before it exits, and Run waits for it.
func assertGone(t *testing.T, pids []int) {
	t.Helper()
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process %d still exists when Run returned (kill 0: %v)", pid, err)
		}
	}
}

// TestExecStopKillsTree checks that a timeout and a cancelled attempt kill
// the whole tree, setsid grandchild included, by the time Run returns.
func TestExecStopKillsTree(t *testing.T) {
	for _, tt := range []struct {
		name string
		// stop returns the attempt's context and what the test does to it
		// once the tree runs.
		stop  func() (context.Context, func(), func())
		cause error
	}{
		{"timeout", func() (context.Context, func(), func()) {
			// Long enough for the tree to start on a loaded machine.
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			return ctx, func() {}, cancel
		}, context.DeadlineExceeded},
		{"cancel", func() (context.Context, func(), func()) {
			ctx, cancel := context.WithCancelCause(context.Background())
			return ctx, func() { cancel(errTestLeaseLost) }, func() { cancel(nil) }
		}, errTestLeaseLost},
	} {
		t.Run(tt.name, func(t *testing.T) {
			const grace = 200 * time.Millisecond
			dir := t.TempDir()
			task, _ := newExecTask(t, map[string]any{"command": treeScript(dir, "wait"), "grace": grace.String()})
			ctx, stop, release := tt.stop()
			defer release()
			done := make(chan error, 1)
			go func() { done <- task.Run(ctx) }()
			pids := treePids(t, dir)
			stop()
			var err error
			select {
			case err = <-done:
			case <-time.After(5*time.Second + grace + 10*time.Second):
				t.Fatal("Run did not return after the grace")
			}
			if !errors.Is(err, tt.cause) {
				t.Errorf("Run = %v, want it to wrap %v", err, tt.cause)
			}
			var xe *ExitError
			if !errors.As(err, &xe) || xe.Signal != syscall.SIGKILL || !strings.Contains(xe.Output, "started") {
				t.Errorf("Run = %v, want an ExitError for SIGKILL (the shell ignores SIGTERM) with the output", err)
			}
			assertGone(t, pids)
		})
	}
}

// TestExecExitKillsTree checks that a command that exits leaves nothing
// behind, not even what left its group and session.
func TestExecExitKillsTree(t *testing.T) {
	dir := t.TempDir()
	task, rec := newExecTask(t, map[string]any{"command": treeScript(dir, "exit 0")})
	start := time.Now()
	if err := task.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Run took %v", d)
	}
	if got := rec.last(t)["output"]; got != "started\n" {
		t.Errorf("output %q", got)
	}
	var pids []int
	for _, name := range []string{"setsid", "orphan"} {
		pids = append(pids, readPid(t, filepath.Join(dir, name)))
	}
	assertGone(t, pids)
}

// startSupervisor starts the test binary as a supervisor of script, as
// startSupervised would, but keeps the control pipe for the test.
func startSupervisor(t *testing.T, script string, args ...string) (sup *exec.Cmd, ctl *os.File, status *os.File) {
	t.Helper()
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stR, stW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	argv := []string{superviseArg, "/bin/sh", "sh", "-c", script, "sh"}
	cmd := exec.Command(selfExe, append(argv, args...)...)
	cmd.ExtraFiles = []*os.File{ctlR, stW}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ctlR.Close()
	stW.Close()
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		ctlW.Close()
		stR.Close()
	})
	return cmd, ctlW, stR
}

// TestSupervisorDaemonGone checks the supervisor's own side of the daemon's
// death: the end of the control pipe (the daemon died, even of SIGKILL)
// and its death signal (SIGTERM) each kill the whole tree at once, command
// included, and the supervisor then exits.
func TestSupervisorDaemonGone(t *testing.T) {
	for name, kill := range map[string]func(sup *exec.Cmd, ctl *os.File){
		"control pipe closed": func(_ *exec.Cmd, ctl *os.File) { ctl.Close() },
		"death signal":        func(sup *exec.Cmd, _ *os.File) { sup.Process.Signal(syscall.SIGTERM) },
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			script := treeScript(dir, `echo $$ > "$1/command"; wait`)[2].(string)
			sup, ctl, status := startSupervisor(t, script, dir)
			pids := treePids(t, dir)
			waitFor(t, 10*time.Second, "the command's pid", func() bool { return exists(filepath.Join(dir, "command")) })
			pids = append(pids, readPid(t, filepath.Join(dir, "command")))
			kill(sup, ctl)

			exited := make(chan error, 1)
			go func() { exited <- sup.Wait() }()
			select {
			case err := <-exited:
				if err != nil {
					t.Errorf("supervisor: %v, want exit status 0", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the supervisor did not exit within 5s")
			}
			assertGone(t, pids)
			status.SetReadDeadline(time.Now().Add(time.Second))
			var b bytes.Buffer
			b.ReadFrom(status)
			lines := strings.Split(strings.TrimSpace(b.String()), "\n")
			want := []string{fmt.Sprintf("started %d", pids[2]), fmt.Sprintf("exit %d", uint32(syscall.SIGKILL))}
			if len(lines) != 2 || lines[0] != want[0] || lines[1] != want[1] {
				t.Errorf("status reports %q, want %q", lines, want)
			}
		})
	}
}

// TestSupervisorStartError checks that a command that cannot start reads
// as it did without the supervisor: os/exec's error, with its errno.
func TestSupervisorStartError(t *testing.T) {
	task, _ := newExecTask(t, map[string]any{"command": []any{"/nonexistent/program"}})
	err := task.Run(context.Background())
	var pe *os.PathError
	if !errors.As(err, &pe) || pe.Op != "fork/exec" || !errors.Is(err, syscall.ENOENT) {
		t.Errorf("Run = %v, want a fork/exec PathError for ENOENT", err)
	}
	if want := "tasks: exec: start /nonexistent/program: fork/exec /nonexistent/program: no such file or directory"; err == nil || err.Error() != want {
		t.Errorf("Run = %v, want %q", err, want)
	}
}

// TestExecDirect checks the fallback used without /proc: the exit status,
// output and SIGTERM-then-SIGKILL stop work as they do under a supervisor.
func TestExecDirect(t *testing.T) {
	task, _ := newExecTask(t, map[string]any{"command": shell("echo out; exit 4")})
	task.(*execTask).start = startDirect
	var xe *ExitError
	if err := task.Run(context.Background()); !errors.As(err, &xe) || xe.ExitCode != 4 || xe.Output != "out\n" {
		t.Errorf("Run = %v, want exit status 4 with output", err)
	}

	task, _ = newExecTask(t, map[string]any{"command": shell(`trap '' TERM; sleep 100 & wait`), "grace": "100ms"})
	task.(*execTask).start = startDirect
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := task.Run(ctx); !errors.As(err, &xe) || xe.Signal != syscall.SIGKILL || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Run = %v, want SIGKILL after the grace", err)
	}
}

// TestSupervisorUnresponsive checks the daemon's last resort: a supervisor
// that has not ended supervisorKill after 'K' (here it is stopped) is
// killed, Run returns, and the command dies with it (its Pdeathsig).
func TestSupervisorUnresponsive(t *testing.T) {
	const grace = 100 * time.Millisecond
	dir := t.TempDir()
	task, _ := newExecTask(t, map[string]any{
		"command": shell(`echo $$ > "$1/cmd.tmp"; echo $PPID > "$1/sup.tmp"; mv "$1/cmd.tmp" "$1/cmd"; mv "$1/sup.tmp" "$1/sup"; trap '' TERM; while :; do sleep 0.05; done`, dir),
		"grace":   grace.String(),
	})
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	done := make(chan error, 1)
	go func() { done <- task.Run(ctx) }()
	waitFor(t, 10*time.Second, "the command to start", func() bool { return exists(filepath.Join(dir, "sup")) })
	sup, cmd := readPid(t, filepath.Join(dir, "sup")), readPid(t, filepath.Join(dir, "cmd"))
	t.Cleanup(func() { killIfRunning(sup); killIfRunning(cmd) })
	if err := syscall.Kill(sup, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	cancel(errTestLeaseLost)
	var err error
	select {
	case err = <-done:
	case <-time.After(grace + supervisorKill + 10*time.Second):
		t.Fatal("Run did not return")
	}
	if d := time.Since(start); d < grace+supervisorKill {
		t.Errorf("Run returned after %v, before grace + supervisorKill", d)
	}
	var xe *ExitError
	if !errors.As(err, &xe) || xe.Signal != syscall.SIGKILL || !errors.Is(err, errTestLeaseLost) {
		t.Errorf("Run = %v, want an ExitError for SIGKILL wrapping the cause", err)
	}
	waitFor(t, 5*time.Second, fmt.Sprintf("command %d to die", cmd), func() bool { return processGone(cmd) })
}
