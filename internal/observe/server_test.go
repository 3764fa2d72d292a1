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

// Beyond the cap a connection is closed as it is accepted; once one of
// the held connections closes, a new one is served again.
func TestServeCapsConnections(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := observe.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") }))
	done := make(chan error, 1)
	go func() { done <- observe.Serve(srv, ln, 3) }()
	t.Cleanup(func() { srv.Close(); <-done })
	addr := ln.Addr().String()

	var held []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		// A request answered proves the connection was accepted and counted.
		if got := get(t, c); got != "ok" {
			t.Fatalf("held connection: %q", got)
		}
	}
	extra, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	extra.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(extra, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	if n, err := extra.Read(make([]byte, 64)); err == nil || n > 0 {
		t.Fatalf("connection beyond the cap was served: %d bytes, %v", n, err)
	}
	extra.Close()

	held[0].Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		got := get(t, c)
		c.Close()
		if got == "ok" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no connection served after one of the held ones closed")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// get sends GET / on c (keep-alive) and returns the body's first line, or
// "" if the connection was closed.
func get(t *testing.T, c net.Conn) string {
	t.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
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
