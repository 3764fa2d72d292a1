//go:build !linux

package tasks

import "syscall"

// orphanSignal: only Linux can have the kernel kill a command whose daemon
// died; elsewhere it runs on, and the fencing token must guard its writes.
func orphanSignal(*syscall.SysProcAttr) {}
