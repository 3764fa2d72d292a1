package observe_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/observe"
)

// The server sets every bound: a daemon's descriptors are shared with its
// tasks.
func TestNewServerBounds(t *testing.T) {
	srv := observe.NewServer(http.NotFoundHandler())
	if srv.ReadHeaderTimeout <= 0 || srv.ReadTimeout <= 0 || srv.WriteTimeout <= 0 || srv.IdleTimeout <= 0 || srv.MaxHeaderBytes <= 0 {
		t.Fatalf("unbounded server: %+v", srv)
	}
	if srv.WriteTimeout < 2*5*time.Second {
		t.Errorf("WriteTimeout %v leaves too little room for the page and /metrics", srv.WriteTimeout)
	}
}

// At the cap, a new connection takes the place of the one idle longest;
// when every connection is serving a request, it is closed as accepted.
func TestServeCapsConnections(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	entered := make(chan struct{}, 3)
	srv := observe.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/block" {
			entered <- struct{}{}
			<-release
		}
		io.WriteString(w, "ok\n")
	}))
	// The server's own record of a connection turning idle comes after
	// the response is written, so after the client may have read it: the
	// test waits for it, since which connection is idle longest is what
	// it checks.
	idled := make(chan struct{}, 16)
	srv.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateIdle {
			select {
			case idled <- struct{}{}:
			default: // only those of the first part are awaited
			}
		}
	}
	awaitIdle := func() {
		t.Helper()
		select {
		case <-idled:
		case <-time.After(10 * time.Second):
			t.Fatal("a served connection never turned idle")
		}
	}
	done := make(chan error, 1)
	go func() { done <- observe.Serve(srv, ln, 3) }()
	t.Cleanup(func() { srv.Close(); <-done })
	addr := ln.Addr().String()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}

	// Three idle keep-alive connections, the first idle longest.
	var idle []net.Conn
	for range 3 {
		c := dial()
		if got := get(t, c, "/"); got != "ok" {
			t.Fatalf("connection within the cap: %q", got)
		}
		idle = append(idle, c)
		awaitIdle()
	}
	// A fourth is served, in the place of the first.
	if got := get(t, dial(), "/"); got != "ok" {
		t.Fatalf("a new connection at the cap of idle ones: %q, want served", got)
	}
	awaitIdle()
	if got := get(t, idle[0], "/"); got != "" {
		t.Errorf("the connection idle longest still served %q after a new one took its place", got)
	}
	if got := get(t, idle[2], "/"); got != "ok" {
		t.Errorf("a more recent idle connection was closed (%q)", got)
	}
	awaitIdle() // else it still counts as busy below

	// Three busy connections: a fourth is closed unread.
	// Each is dialled once the one before is being served: a connection
	// whose request has not been read yet counts as idle, and the next
	// would take its place.
	for i := range 3 {
		c := dial()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, "GET /block HTTP/1.1\r\nHost: x\r\n\r\n")
		select {
		case <-entered:
		case <-time.After(10 * time.Second):
			t.Fatalf("busy request %d never reached the handler", i+1)
		}
	}
	extra := dial()
	if got := get(t, extra, "/"); got != "" {
		t.Errorf("a connection beyond a cap of busy ones was served: %q", got)
	}
	close(release)
	// The busy connections turn idle once their handlers have returned and
	// their responses are written; from then on a new connection takes the
	// place of one of them. Until then it may still be refused.
	deadline := time.Now().Add(10 * time.Second)
	for got := get(t, dial(), "/"); got != "ok"; got = get(t, dial(), "/") {
		if time.Now().After(deadline) {
			t.Fatalf("no connection served in 10s once the busy ones were done: %q", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// get sends GET path on c (keep-alive) and returns the body's first
// line, or "" if the connection was closed.
func get(t *testing.T, c net.Conn, path string) string {
	t.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		return ""
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if len(b) > 0 && b[len(b)-1] == '\n' {
		b = b[:len(b)-1]
	}
	return string(b)
}
