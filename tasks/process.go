package tasks

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
)

// process is one started attempt of an exec task: the command and every
// process it starts. Run drives it: terminate when the attempt is cut short,
// kill once the grace is up, wait always.
type process interface {
	// terminate asks the command to stop: SIGTERM to its process group.
	terminate()
	// kill ends the command and the processes it started, at once. It does
	// not wait; wait does.
	kill()
	// wait returns the command's wait status once it has exited and what
	// it left behind has been killed.
	wait() (syscall.WaitStatus, error)
}

// command is what startProcess starts: the resolved path, argv as
// configured (argv[0] is what the command sees), its directory ("" for
// the daemon's), its whole environment, and where its stdout and stderr go.
type command struct {
	path string
	argv []string
	dir  string
	env  []string
	out  *os.File
}

// direct is a command run as the daemon's own child, in a process group
// of its own: the fallback where the supervisor is not available. It
// reaches what stays in that group, not what leaves it (setsid, setpgid),
// and nothing once the daemon is dead (Pdeathsig reaches the command only).
type direct struct{ cmd *exec.Cmd }

func startDirect(c command) (process, error) {
	cmd := exec.Command(c.path, c.argv[1:]...)
	cmd.Args[0] = c.argv[0]
	cmd.Dir, cmd.Env = c.dir, c.env
	cmd.Stdout, cmd.Stderr = c.out, c.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	orphanSignal(cmd.SysProcAttr)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &direct{cmd}, nil
}

func (p *direct) terminate() { syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM) }

func (p *direct) kill() { syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL) }

func (p *direct) wait() (syscall.WaitStatus, error) {
	err := p.cmd.Wait()
	// A group lives on while it has members, and its id cannot be reused
	// until it is empty; ESRCH means nothing was left.
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	if p.cmd.ProcessState == nil { // Wait failed before the command ended; not seen on Unix
		return 0, err
	}
	ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok {
		return 0, errors.New("no wait status")
	}
	return ws, nil
}
