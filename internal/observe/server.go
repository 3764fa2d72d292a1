package observe

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// Bounds of the HTTP server. A daemon's descriptors are shared with its
// tasks (each exec attempt opens pipes), so the server must not be able to
// hold them all: idle connections are closed, slow clients are cut off, and
// at most MaxConns connections are open at once.
const (
	// MaxConns bounds the open connections; further ones are closed as
	// soon as they are accepted, without being read.
	MaxConns = 64
	// ReadHeaderTimeout bounds the wait for a request's headers.
	ReadHeaderTimeout = 5 * time.Second
	// ReadTimeout bounds the reading of a whole request (they have no body).
	ReadTimeout = 10 * time.Second
	// WriteTimeout bounds a response from the end of its request's headers;
	// it leaves room for pageTimeout and for /metrics with many tasks.
	WriteTimeout = 30 * time.Second
	// IdleTimeout closes a keep-alive connection left idle this long.
	IdleTimeout = 30 * time.Second
	// MaxHeaderBytes bounds a request's headers.
	MaxHeaderBytes = 16 << 10
)

// NewServer returns the HTTP server of h with the bounds above.
func NewServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
	}
}

// Serve serves srv on ln with at most maxConns connections open at once
// (MaxConns if maxConns ≤ 0): a connection beyond them is closed at once,
// so that it costs a descriptor only for an instant. It returns as
// srv.Serve does.
func Serve(srv *http.Server, ln net.Listener, maxConns int) error {
	if maxConns <= 0 {
		maxConns = MaxConns
	}
	return srv.Serve(&limitListener{Listener: ln, slots: make(chan struct{}, maxConns)})
}

// limitListener accepts connections while fewer than cap(slots) are open
// and closes the others as it accepts them. Refusing (rather than leaving
// them in the kernel's backlog, as a listener that waits for a free slot
// would) tells a client at once, and keeps the accept queue short.
type limitListener struct {
	net.Listener
	slots chan struct{}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.slots <- struct{}{}:
			return &limitedConn{Conn: c, free: func() { <-l.slots }}, nil
		default:
			c.Close()
		}
	}
}

// limitedConn frees its slot once, on its first Close.
type limitedConn struct {
	net.Conn
	free func()
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.free)
	return err
}
