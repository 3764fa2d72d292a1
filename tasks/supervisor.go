package tasks

import (
	"fmt"
	"os"
	"syscall"
)

// The supervisor is the process that runs one attempt of an exec task on
// Linux: the daemon's own binary re-executed as
//
//	<binary> __supervise <path> <argv...>
//
// in the task's directory, with the task's environment and output, and two
// more pipes: fd 3 (ctlFD) from the daemon, fd 4 (statusFD) to it. It is a
// child subreaper, so every process the command starts, and every process
// those start, whether or not it calls setsid, stays its descendant. It
// starts the command in a process group of its own and
//
//   - on 'T' from the daemon, sends SIGTERM to the command's group;
//   - on 'K', on the end of the control pipe (the daemon died, even of
//     SIGKILL, or is done), or on a signal that would end it (SIGTERM,
//     SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2; the daemon sets SIGTERM as
//     its Pdeathsig), and as soon as the command has exited, kills every
//     descendant with SIGKILL, again until none is left;
//
// and exits only once it has no child left. It reports on the status pipe,
// one line each: "started <pid>" or "start-error <errno>", then
// "exit <wait status>" when the command has exited.
//
// Only SIGKILL of the supervisor itself escapes it: the command gets
// SIGKILL then (its Pdeathsig), but what it started is left to init.
const (
	superviseArg = "__supervise"
	ctlFD        = 3
	statusFD     = 4

	ctlTerminate = 'T'
	ctlKill      = 'K'

	// exitSuperviseUsage is the supervisor's exit status when it was not
	// started by an exec task (missing arguments or pipes).
	exitSuperviseUsage = 125
)

// The hook that turns any binary linking this package — slotd, a build
// with custom plugins, a test binary — into the supervisor when it is
// started as one. It runs during package initialisation, before main and
// before the packages that import this one are initialised, and it never
// returns: whatever happens, the process exits here. A supervisor that
// fell through to main would run the program it was built as, which could
// start tasks, and so supervisors, of its own. syscall.Exit rather than
// os.Exit: there is nothing to flush, and a race-enabled build would sleep
// a second at exit (the race runtime's atexit_sleep_ms), at the end of
// every attempt.
func init() {
	if len(os.Args) > 1 && os.Args[1] == superviseArg {
		syscall.Exit(supervise(os.Args[2:]))
	}
}

// supervisorUsage says on stderr that the supervisor is not a command.
func supervisorUsage(why string) int {
	fmt.Fprintf(os.Stderr, "%s %s: %s; this is the internal supervisor of exec tasks, not a command\n",
		os.Args[0], superviseArg, why)
	return exitSuperviseUsage
}
