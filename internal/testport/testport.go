// Package testport picks loopback ports for the servers tests start.
//
// A port taken by listening on 127.0.0.1:0 comes from the kernel's
// ephemeral range, the one outgoing connections take their local ports
// from: after a test stops a server to restart it on the same port, one of
// the suite's thousands of client connections may hold that port by then,
// and the restart fails with "Address already in use". Free picks below
// that range instead, where no connection is given a port.
package testport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// The ports Free picks from, when the ephemeral range starts above them.
const (
	low  = 10000
	high = 32767 // the usual ephemeral range starts at 32768
)

// Free returns a port on 127.0.0.1 free at the time of the call, outside the
// kernel's ephemeral range where it can.
func Free(t testing.TB) int {
	t.Helper()
	top := high
	if first, ok := ephemeralStart(); ok && first-1 < top {
		top = first - 1
	}
	if top-low >= 1000 {
		for range 100 {
			port := low + rand.IntN(top-low+1)
			if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port)); err == nil {
				l.Close()
				return port
			}
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testport: free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// ephemeralStart is the first port of the kernel's ephemeral range (Linux).
func ephemeralStart() (int, bool) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil || len(b) > 64 {
		return 0, false
	}
	var first, last int
	if _, err := fmt.Sscan(strings.TrimSpace(string(b)), &first, &last); err != nil {
		return 0, false
	}
	return first, true
}
