package tasks

import "syscall"

// orphanSignal makes the kernel kill a directly run command if the daemon
// dies without cancelling it (kill -9, OOM): the attempt's lease will run
// out and a peer retry it, and a survivor would overlap that retry. The
// signal is tied to the forking OS thread, which the Go runtime never ends
// for an unlocked goroutine such as Run's.
func orphanSignal(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }

// startProcess runs c under a supervisor, which kills every process of the
// attempt, whatever its process group or session, when the attempt ends,
// is stopped, or the daemon dies. Without /proc it runs c directly.
func startProcess(c command) (process, error) {
	if supervisorAvailable() {
		return startSupervised(c)
	}
	return startDirect(c)
}
