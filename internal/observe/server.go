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
	// MaxConns bounds the open connections (see Serve).
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
// (MaxConns if maxConns ≤ 0). When they are all open, a new connection
// takes the place of the one idle longest (between requests, or not yet
// through its first request's headers): a client that parks connections
// can neither hold the server's descriptors nor lock /healthz out. If all
// are busy serving a request, the new one is closed at once, so that it
// costs a descriptor only for an instant. It returns as srv.Serve does;
// srv.ConnState is set (and calls the one it had).
func Serve(srv *http.Server, ln net.Listener, maxConns int) error {
	if maxConns <= 0 {
		maxConns = MaxConns
	}
	l := &limitListener{Listener: ln, max: maxConns, conns: map[*limitedConn]connState{}}
	next := srv.ConnState
	srv.ConnState = func(c net.Conn, st http.ConnState) {
		if lc, ok := c.(*limitedConn); ok {
			l.track(lc, st)
		}
		if next != nil {
			next(c, st)
		}
	}
	return srv.Serve(l)
}

// limitListener keeps at most max connections open, evicting the one idle
// longest to admit a new one.
type limitListener struct {
	net.Listener
	max int

	mu    sync.Mutex
	conns map[*limitedConn]connState // the open ones
}

// connState is where a connection is, and since when.
type connState struct {
	state http.ConnState
	since time.Time
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		lc := &limitedConn{Conn: c, l: l}
		l.mu.Lock()
		var victim *limitedConn
		if len(l.conns) >= l.max {
			if victim = l.idlest(); victim != nil {
				delete(l.conns, victim)
			}
		}
		admit := len(l.conns) < l.max
		if admit {
			l.conns[lc] = connState{state: http.StateNew, since: time.Now()}
		}
		l.mu.Unlock()
		if victim != nil {
			victim.Conn.Close() // its server goroutine sees it and ends
		}
		if admit {
			return lc, nil
		}
		c.Close()
	}
}

// idlest returns the open connection idle (or new) the longest, or nil if
// all are serving a request. l.mu is held.
func (l *limitListener) idlest() *limitedConn {
	var v *limitedConn
	var since time.Time
	for c, s := range l.conns {
		if (s.state == http.StateIdle || s.state == http.StateNew) && (v == nil || s.since.Before(since)) {
			v, since = c, s.since
		}
	}
	return v
}

// track records c's new state; a closed or hijacked connection is no
// longer the listener's.
func (l *limitListener) track(c *limitedConn, st http.ConnState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, open := l.conns[c]; !open {
		return
	}
	if st == http.StateClosed || st == http.StateHijacked {
		delete(l.conns, c)
		return
	}
	l.conns[c] = connState{state: st, since: time.Now()}
}

// limitedConn leaves its listener's count when closed.
type limitedConn struct {
	net.Conn
	l *limitListener
}

func (c *limitedConn) Close() error {
	c.l.mu.Lock()
	delete(c.l.conns, c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}
