package tasks

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

// prSetChildSubreaper is PR_SET_CHILD_SUBREAPER from <linux/prctl.h>.
const prSetChildSubreaper = 36

// killPoll is how often a killing supervisor looks for children again
// when no SIGCHLD tells it to.
const killPoll = 20 * time.Millisecond

// endSignals are the signals on which the supervisor kills the tree and
// exits rather than dying and leaving it behind.
var endSignals = []os.Signal{
	syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2,
}

// supervise is the supervisor's main; args are the command's path and
// argv. It returns the supervisor's exit status, which says nothing about
// the command's: that goes to the status pipe.
func supervise(args []string) int {
	if len(args) < 2 {
		return supervisorUsage("missing command")
	}
	for _, fd := range []int{ctlFD, statusFD} {
		var st syscall.Stat_t
		if err := syscall.Fstat(fd, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFIFO {
			return supervisorUsage(fmt.Sprintf("fd %d is not a pipe", fd))
		}
		// The command must not inherit them: it would hold the daemon's
		// pipes open, and could write to the status pipe.
		syscall.CloseOnExec(fd)
	}
	s := &supervisor{
		status: os.NewFile(statusFD, "status"),
		self:   os.Getpid(),
	}
	s.run(args[0], args[1:], os.NewFile(ctlFD, "control"))
	return 0
}

type supervisor struct {
	status *os.File
	self   int
	pid    int  // the command
	exited bool // the command has exited and been reaped
}

// report writes one line to the daemon. A failed write means the daemon
// is gone, which the control pipe reports as well.
func (s *supervisor) report(format string, args ...any) {
	fmt.Fprintf(s.status, format+"\n", args...)
}

func (s *supervisor) run(path string, argv []string, ctl *os.File) {
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); e != 0 {
		s.report("start-error %d", e)
		return
	}
	// Before the fork, so that no SIGCHLD is missed. A signal the daemon
	// ignores stays ignored (nohup): the command inherits it as it would
	// from the daemon.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGCHLD)
	for _, sig := range endSignals {
		if !signal.Ignored(sig) {
			signal.Notify(sigs, sig)
		}
	}

	devNull, err := os.Open(os.DevNull) // as os/exec gives a command without stdin
	if err != nil {
		s.report("start-error %d", errnoOf(err))
		return
	}
	// Our directory and environment are the command's, set by the daemon.
	// The main goroutine is locked to the main thread during package
	// initialisation, so the Pdeathsig below is tied to the supervisor's
	// life, not to a thread the runtime could end.
	s.pid, err = syscall.ForkExec(path, argv, &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: []uintptr{devNull.Fd(), 1, 2},
		Sys:   &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
	})
	devNull.Close()
	if err != nil {
		s.report("start-error %d", errnoOf(err))
		return
	}
	s.report("started %d", s.pid)

	ctlc := make(chan byte)
	go func() { // ends with the process
		b := make([]byte, 1)
		for {
			if n, err := ctl.Read(b); n == 1 {
				ctlc <- b[0]
			} else if err != nil {
				close(ctlc)
				return
			}
		}
	}()

	var poll <-chan time.Time
	killing := false
	for {
		left := s.reap()
		if s.exited {
			killing = true // what the command left behind goes with it
		}
		if killing {
			if !left {
				return
			}
			s.killChildren()
			if poll == nil {
				t := time.NewTicker(killPoll)
				defer t.Stop()
				poll = t.C
			}
		}
		select {
		case sig := <-sigs:
			if sig != syscall.SIGCHLD {
				killing = true
			}
		case b, ok := <-ctlc:
			switch {
			case !ok:
				ctlc = nil // the daemon is gone; a closed channel would spin
				killing = true
			case b == ctlKill:
				killing = true
			case b == ctlTerminate && !s.exited:
				// Unreaped, the command holds its group id: no other group
				// can have it.
				syscall.Kill(-s.pid, syscall.SIGTERM)
			}
		case <-poll:
		}
	}
}

// reap collects every child that has exited and reports whether any child,
// live or not yet collected, is left. The command's status goes to the
// daemon as soon as it is known.
func (s *supervisor) reap() (left bool) {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case err != nil: // ECHILD: none left
			return false
		case pid == 0: // children left, none exited
			return true
		case pid == s.pid:
			s.exited = true
			s.report("exit %d", uint32(ws))
		}
	}
}

// killChildren sends SIGKILL to every child: the command if it runs, and
// whatever of its descendants came to the supervisor when their parents
// died. Only children, because only the supervisor reaps them, so a pid
// read from /proc cannot have been reused by the time it is killed; their
// own children come to the supervisor as they die, for the next round.
func (s *supervisor) killChildren() {
	if !s.exited {
		syscall.Kill(-s.pid, syscall.SIGKILL) // the command's group at once
	}
	for _, pid := range childrenOf(s.self) {
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

// childrenOf lists the processes whose parent is ppid, from /proc/*/stat.
func childrenOf(ppid int) []int {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	var pids []int
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		if p, ok := parentOf(pid); ok && p == ppid {
			pids = append(pids, pid)
		}
	}
	return pids
}

// parentOf reads a process's parent from /proc/<pid>/stat.
func parentOf(pid int) (int, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(string(f[1]))
	return ppid, err == nil
}

// errnoOf is the errno in err, or EINVAL.
func errnoOf(err error) syscall.Errno {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return syscall.EINVAL
}
