package tasks

import (
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"
)

// Defaults and bounds of the http plugin's connection pool (HTTPPool),
// also those of the configuration's [plugins.http] keys.
const (
	// DefaultHTTPMaxIdlePerHost keeps enough idle connections to one host
	// for a burst of that many concurrent requests to start without a
	// dial: a fleet of tasks due at the same second posting to one
	// endpoint. net/http's default, 2, made almost every request of such a
	// burst open (and close) a connection of its own.
	DefaultHTTPMaxIdlePerHost = 256
	// DefaultHTTPIdleTimeout is how long an idle connection is kept.
	DefaultHTTPIdleTimeout = 90 * time.Second

	// MaxHTTPMaxIdlePerHost bounds MaxIdlePerHost: each idle connection
	// holds a file descriptor.
	MaxHTTPMaxIdlePerHost = 10000
)

// HTTPPool is how the http plugin keeps connections. There is one pool per
// process, shared by every http task: requests to one host reuse its
// connections (HTTP/1.1 keep-alive, or one multiplexed HTTP/2 connection
// where a TLS server offers h2 by ALPN) instead of dialling each time.
type HTTPPool struct {
	// MaxIdlePerHost is how many idle connections are kept per host
	// (scheme, host and port); a burst of more concurrent requests dials
	// the rest, and closes them after. 1 to MaxHTTPMaxIdlePerHost.
	MaxIdlePerHost int
	// IdleTimeout closes a connection idle this long; positive.
	IdleTimeout time.Duration
	// MaxConnsPerHost bounds the connections open to one host at once,
	// idle or busy; requests beyond it wait for one to be free (their
	// task's timeout still runs). 0 sets no bound. The default,
	// DefaultHTTPMaxIdlePerHost, opens no connection the idle pool cannot
	// keep: thousands of tasks posting to one endpoint in the same second
	// then share a few hundred connections instead of dialling one each
	// (and closing most after), which cost a replica more CPU and memory
	// than the requests themselves (docs/performance.md).
	MaxConnsPerHost int
}

// DefaultHTTPPool is the pool used until SetHTTPPool is called.
var DefaultHTTPPool = HTTPPool{MaxIdlePerHost: DefaultHTTPMaxIdlePerHost, IdleTimeout: DefaultHTTPIdleTimeout,
	MaxConnsPerHost: DefaultHTTPMaxIdlePerHost}

// Validate returns an error naming the field that is out of bounds.
func (p HTTPPool) Validate() error {
	var errs []error
	if p.MaxIdlePerHost < 1 || p.MaxIdlePerHost > MaxHTTPMaxIdlePerHost {
		errs = append(errs, fmt.Errorf("tasks: http pool: MaxIdlePerHost %d: want 1 to %d", p.MaxIdlePerHost, MaxHTTPMaxIdlePerHost))
	}
	if p.MaxConnsPerHost < 0 || p.MaxConnsPerHost > MaxHTTPMaxIdlePerHost {
		errs = append(errs, fmt.Errorf("tasks: http pool: MaxConnsPerHost %d: want 0 (no bound) to %d", p.MaxConnsPerHost, MaxHTTPMaxIdlePerHost))
	}
	if p.IdleTimeout <= 0 {
		errs = append(errs, fmt.Errorf("tasks: http pool: IdleTimeout %v: must be positive", p.IdleTimeout))
	}
	return errors.Join(errs...)
}

// sharedHTTP is the process's client, built on first use: read on every
// request, so without a lock.
var sharedHTTP atomic.Pointer[http.Client]

// SetHTTPPool makes every http task's requests from now on use a pool
// configured as p: the daemon calls it with the configuration's
// [plugins.http] before it starts. A request in flight finishes on its
// connection; the previous pool's idle connections are closed. It returns
// an error, and changes nothing, if p is invalid.
func SetHTTPPool(p HTTPPool) error {
	if err := p.Validate(); err != nil {
		return err
	}
	old := sharedHTTP.Swap(&http.Client{Transport: newHTTPTransport(p)})
	if old != nil {
		old.CloseIdleConnections()
	}
	return nil
}

// httpClient returns the process's client, built from DefaultHTTPPool if
// SetHTTPPool has not been called.
func httpClient() *http.Client {
	if c := sharedHTTP.Load(); c != nil {
		return c
	}
	sharedHTTP.CompareAndSwap(nil, &http.Client{Transport: newHTTPTransport(DefaultHTTPPool)})
	return sharedHTTP.Load()
}

// newHTTPTransport returns net/http's default transport — proxy from the
// environment, its dial, keep-alive and TLS handshake timeouts — with p's
// idle pool. HTTP/2 is attempted explicitly (ForceAttemptHTTP2): net/http
// does so on its own only for a transport left as it built it, and this
// one is changed, so that h2 would otherwise be off.
func newHTTPTransport(p HTTPPool) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 0 // no bound across hosts: each host's is MaxIdlePerHost
	t.MaxIdleConnsPerHost = p.MaxIdlePerHost
	t.IdleConnTimeout = p.IdleTimeout
	t.MaxConnsPerHost = p.MaxConnsPerHost
	t.ForceAttemptHTTP2 = true
	return t
}
