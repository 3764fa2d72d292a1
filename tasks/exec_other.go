//go:build !linux

package tasks

import (
	"runtime"
	"syscall"
)

// orphanSignal: only Linux can have the kernel kill a command whose daemon
// died; elsewhere it runs on, and the fencing token must guard its writes.
func orphanSignal(*syscall.SysProcAttr) {}

// startProcess runs c directly: the supervisor needs Linux (a child
// subreaper, Pdeathsig, /proc). What leaves the command's process group
// or outlives the daemon is not killed.
func startProcess(c command) (process, error) { return startDirect(c) }

// supervise refuses: there is no supervisor outside Linux.
func supervise([]string) int { return supervisorUsage("not supported on " + runtime.GOOS) }
