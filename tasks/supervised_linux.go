package tasks

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// selfExe is the daemon's own binary as the kernel knows it: it names that
// binary even once the file is replaced or deleted (an upgrade in place),
// so the supervisor is always the daemon's own build.
const selfExe = "/proc/self/exe"

// supervisorStart bounds the wait for the supervisor's first report; it
// comes within milliseconds.
const supervisorStart = 10 * time.Second

// supervisorKill bounds how long the supervisor may take, after 'K', to
// kill the tree and exit before the daemon kills it: a process stuck in
// the kernel (D state) cannot die, and must not hold the attempt forever.
const supervisorKill = 5 * time.Second

// supervisorAvailable reports whether this system can run the supervisor:
// it needs /proc, for its own binary and to find its children.
var supervisorAvailable = sync.OnceValue(func() bool {
	_, err := os.Stat(selfExe)
	return err == nil
})

// supervised is a command run under a supervisor (see supervisor.go),
// seen from the daemon.
type supervised struct {
	cmd     *exec.Cmd     // the supervisor
	pid     int           // the command, as the supervisor reported it
	ctl     *os.File      // to the supervisor; closing it kills the tree
	status  *os.File      // from the supervisor
	r       *bufio.Reader // of status
	reports chan struct{} // closed when the supervisor's reports end

	mu     sync.Mutex
	exit   syscall.WaitStatus // the command's, once reported
	exited bool
	killer *time.Timer // kills the supervisor if it does not end in time
	waited bool
}

func startSupervised(c command) (process, error) {
	if len(os.Args) > 1 && os.Args[1] == superviseArg {
		// A supervisor that got this far was not dispatched by the hook;
		// starting another would start them without end.
		return nil, errors.New("supervisor: a supervisor cannot start one")
	}
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	stR, stW, err := os.Pipe()
	if err != nil {
		ctlR.Close()
		ctlW.Close()
		return nil, err
	}
	cmd := exec.Command(selfExe, append([]string{superviseArg, c.path}, c.argv...)...)
	cmd.Args[0] = os.Args[0]
	cmd.Dir, cmd.Env = c.dir, c.env
	cmd.Stdout, cmd.Stderr = c.out, c.out
	cmd.ExtraFiles = []*os.File{ctlR, stW} // fds 3 and 4
	// A group of its own, like the command's before: a signal to the
	// daemon's group (^C at a terminal) is the daemon's to handle, with
	// its grace. SIGTERM as Pdeathsig, because SIGKILL would leave the
	// command's descendants behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	err = cmd.Start()
	ctlR.Close() // the supervisor has its copies
	stW.Close()
	if err != nil {
		ctlW.Close()
		stR.Close()
		return nil, err
	}

	p := &supervised{cmd: cmd, ctl: ctlW, status: stR, r: bufio.NewReader(stR)}
	stR.SetReadDeadline(time.Now().Add(supervisorStart))
	line, rerr := p.r.ReadString('\n')
	stR.SetReadDeadline(time.Time{})
	if pid, ok := reported(line, "started"); ok {
		p.pid = pid
		p.reports = make(chan struct{})
		go p.readReports()
		return p, nil
	}
	if rerr != nil { // silent: hung, or dead
		cmd.Process.Kill()
	}
	ctlW.Close()
	werr := cmd.Wait()
	stR.Close()
	if errno, ok := reported(line, "start-error"); ok {
		// As os/exec reports it, so the error reads as it did without
		// the supervisor.
		return nil, &os.PathError{Op: "fork/exec", Path: c.path, Err: syscall.Errno(errno)}
	}
	return nil, fmt.Errorf("supervisor: ended without starting the command: %v", errors.Join(werr, rerr))
}

// reported parses a status line "<what> <number>".
func reported(line, what string) (int, bool) {
	rest, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), what+" ")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(rest, 10, 32)
	return int(n), err == nil
}

// readReports reads the supervisor's reports until it exits. Once the
// command has exited, the supervisor gets supervisorKill to kill what the
// command left: a process stuck in the kernel must not hold the attempt
// until its timeout.
func (p *supervised) readReports() {
	defer close(p.reports)
	for {
		line, err := p.r.ReadString('\n')
		if n, ok := reported(line, "exit"); ok {
			p.mu.Lock()
			p.exit, p.exited = syscall.WaitStatus(n), true
			p.mu.Unlock()
			p.armKiller()
		}
		if err != nil {
			return
		}
	}
}

// armKiller has the supervisor killed supervisorKill from now, unless it
// has exited by then or a killer is armed already.
func (p *supervised) armKiller() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.killer == nil && !p.waited {
		p.killer = time.AfterFunc(supervisorKill, func() { p.cmd.Process.Kill() })
	}
}

func (p *supervised) terminate() { p.ctl.Write([]byte{ctlTerminate}) }

func (p *supervised) kill() {
	p.ctl.Write([]byte{ctlKill})
	p.armKiller()
}

// wait waits for the supervisor, which exits once the whole tree is gone.
func (p *supervised) wait() (syscall.WaitStatus, error) {
	err := p.cmd.Wait()
	p.mu.Lock()
	p.waited = true
	if p.killer != nil {
		p.killer.Stop()
	}
	p.mu.Unlock()
	p.ctl.Close()
	// The last reports were written before the supervisor exited; nobody
	// else holds the pipe, so its end is near.
	p.status.SetReadDeadline(time.Now().Add(time.Second))
	<-p.reports
	p.status.Close()

	p.mu.Lock()
	ws, exited := p.exit, p.exited
	p.mu.Unlock()
	if exited {
		return ws, nil
	}
	// The supervisor died before the command did (SIGKILL): the command
	// got SIGKILL too (its Pdeathsig); so does what is left of its group.
	syscall.Kill(-p.pid, syscall.SIGKILL)
	if p.cmd.ProcessState == nil {
		return 0, err
	}
	ws, _ = p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ws, nil
}
