package testport

import (
	"net"
	"strconv"
	"testing"
)

// The port is free (a server can listen on it) and, where the kernel's
// ephemeral range leaves room below it, outside that range: no outgoing
// connection is given it while a test restarts its server there.
func TestFreeIsListenableAndBelowTheEphemeralRange(t *testing.T) {
	first, ok := ephemeralStart()
	for range 20 {
		port := Free(t)
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			t.Fatalf("port %d: %v", port, err)
		}
		l.Close()
		if ok && first-1-low >= 1000 && (port < low || port >= first) {
			t.Fatalf("port %d: outside [%d, %d), below the ephemeral range starting at %d", port, low, first, first)
		}
	}
}
