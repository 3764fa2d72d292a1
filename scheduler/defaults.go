package scheduler

import (
	"os"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// Defaults of the daemon's options (New), also those of the configuration
// file's [daemon] keys.
const (
	DefaultShutdownGrace = 30 * time.Second
	DefaultMaxClockSkew  = time.Second
	// DefaultMaxHooks caps the on_failure hooks one replica runs at once
	// ([daemon] max_hooks): enough for a burst of failures whose hooks
	// page or post, too few to exhaust the host when a hook hangs.
	DefaultMaxHooks = 8
)

// Catchup is a catch-up policy: what a replica does on start-up with a
// slot whose window is still open (Task.Catchup).
type Catchup uint8

const (
	CatchupNone   Catchup = iota // wait for the next fire time
	CatchupLatest                // claim the latest slot if its window is still open
)

// String is the policy's name in the configuration file: "none" or "latest".
func (c Catchup) String() string {
	switch c {
	case CatchupNone:
		return "none"
	case CatchupLatest:
		return "latest"
	}
	return "catchup(" + strconv.Itoa(int(c)) + ")"
}

// DefaultReplica is the replica id when none is configured:
// "<hostname>-<pid>", unique per process on a fleet, at most 128 bytes.
func DefaultReplica() string {
	host, err := os.Hostname()
	if err != nil || host == "" || strings.IndexFunc(host, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
		host = "slotd"
	}
	pid := "-" + strconv.Itoa(os.Getpid())
	if len(host)+len(pid) > 128 {
		host = host[:128-len(pid)]
	}
	return host + pid
}
