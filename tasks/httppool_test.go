package tasks

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// countingServer is a loopback server that counts the connections
// clients open to it.
type countingServer struct {
	*httptest.Server
	conns atomic.Int64
}

// newCountingServer starts a server answering with handler; tls starts it
// with TLS and HTTP/2 enabled.
func newCountingServer(t testing.TB, handler http.HandlerFunc, tls bool) *countingServer {
	t.Helper()
	s := &countingServer{Server: httptest.NewUnstartedServer(handler)}
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	if tls {
		s.EnableHTTP2 = true
		s.StartTLS()
	} else {
		s.Start()
	}
	t.Cleanup(s.Close)
	return s
}

// okHandler answers 200 with a small body, as a webhook sink would.
func okHandler(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok\n")) }

// The shared pool keeps connections to one host: a hundred requests in a
// row go over one or two connections, not a hundred.
func TestHTTPReusesConnections(t *testing.T) {
	srv := newCountingServer(t, okHandler, false)
	task, _ := newHTTPTask(t, map[string]any{"url": srv.URL, "method": "POST", "body": "x"})
	const n = 100
	for i := range n {
		if err := task.Run(context.Background()); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	if c := srv.conns.Load(); c >= n/10 {
		t.Errorf("%d requests opened %d connections, want fewer than %d", n, c, n/10)
	}
}

// Every http task shares the process's pool: two tasks posting to one
// host reuse each other's connections.
func TestHTTPTasksSharePool(t *testing.T) {
	srv := newCountingServer(t, okHandler, false)
	a, _ := newHTTPTask(t, map[string]any{"url": srv.URL + "/a"})
	b, _ := newHTTPTask(t, map[string]any{"url": srv.URL + "/b"})
	for i := range 50 {
		for _, task := range []Task{a, b} {
			if err := task.Run(context.Background()); err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
		}
	}
	if c := srv.conns.Load(); c >= 10 {
		t.Errorf("100 requests of two tasks opened %d connections, want fewer than 10", c)
	}
}

// Bursts of concurrent requests, as many tasks due at one second make:
// the first burst opens about one connection per request, and the next
// ones find them idle in the pool. net/http's default pool (2 idle per
// host) would open nearly every request's connection anew.
func TestHTTPBurstsReuseConnections(t *testing.T) {
	srv := newCountingServer(t, okHandler, false)
	const burst, bursts = 20, 20
	tasks := make([]Task, burst)
	for i := range tasks {
		tasks[i], _ = newHTTPTask(t, map[string]any{"url": srv.URL})
	}
	for b := range bursts {
		var wg sync.WaitGroup
		errs := make(chan error, burst)
		for _, task := range tasks {
			wg.Go(func() {
				if err := task.Run(context.Background()); err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("burst %d: %v", b, err)
		}
	}
	const n = burst * bursts
	if c := srv.conns.Load(); c >= n/10 {
		t.Errorf("%d bursts of %d concurrent requests opened %d connections, want fewer than %d", bursts, burst, c, n/10)
	}
}

// A body larger than the plugin reads is drained (up to bodyDrainMax) so
// its connection is reused too.
func TestHTTPDrainsBody(t *testing.T) {
	big := strings.Repeat("x", 32<<10) // past bodyQuoteMax, within bodyDrainMax
	srv := newCountingServer(t, func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(big)) }, false)
	task, _ := newHTTPTask(t, map[string]any{"url": srv.URL})
	const n = 50
	for i := range n {
		if err := task.Run(context.Background()); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	if c := srv.conns.Load(); c >= n/10 {
		t.Errorf("%d requests with a %d-byte body opened %d connections, want fewer than %d", n, len(big), c, n/10)
	}
}

// tlsClient is the plugin's transport, as SetHTTPPool builds it, trusting
// srv's certificate.
func tlsClient(t testing.TB, srv *httptest.Server) *http.Client {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	tr := newHTTPTransport(DefaultHTTPPool)
	tr.TLSClientConfig = &tls.Config{RootCAs: roots}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// Against a TLS server that offers h2 by ALPN, the plugin's transport
// speaks HTTP/2, and its requests share one connection.
func TestHTTP2Negotiated(t *testing.T) {
	var protos sync.Map
	srv := newCountingServer(t, func(w http.ResponseWriter, r *http.Request) {
		protos.Store(r.Proto, true)
		w.Write([]byte("ok\n"))
	}, true)
	task, _ := newHTTPTask(t, map[string]any{"url": srv.URL, "method": "POST", "body": "x"})
	task.(*httpTask).client = tlsClient(t, srv.Server)
	const n = 50
	for i := range n {
		if err := task.Run(context.Background()); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	protos.Range(func(k, _ any) bool {
		if k != "HTTP/2.0" {
			t.Errorf("a request used %v, want HTTP/2.0 only", k)
		}
		return true
	})
	if _, ok := protos.Load("HTTP/2.0"); !ok {
		t.Error("no request used HTTP/2.0")
	}
	if c := srv.conns.Load(); c != 1 {
		t.Errorf("%d HTTP/2 requests opened %d connections, want 1", n, c)
	}
}

func TestHTTPPoolValidate(t *testing.T) {
	for _, tt := range []struct {
		p       HTTPPool
		wantErr string
	}{
		{DefaultHTTPPool, ""},
		{HTTPPool{MaxIdlePerHost: 1, IdleTimeout: time.Second}, ""},
		{HTTPPool{MaxIdlePerHost: 0, IdleTimeout: time.Second}, "MaxIdlePerHost 0"},
		{HTTPPool{MaxIdlePerHost: MaxHTTPMaxIdlePerHost + 1, IdleTimeout: time.Second}, "MaxIdlePerHost"},
		{HTTPPool{MaxIdlePerHost: 1}, "IdleTimeout 0s"},
		{HTTPPool{MaxIdlePerHost: 1, IdleTimeout: time.Second, MaxConnsPerHost: 16}, ""},
		{HTTPPool{MaxIdlePerHost: 1, IdleTimeout: time.Second, MaxConnsPerHost: -1}, "MaxConnsPerHost -1"},
	} {
		err := tt.p.Validate()
		if (tt.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("%+v.Validate() = %v, want %q", tt.p, err, tt.wantErr)
		}
		if err != nil && SetHTTPPool(tt.p) == nil {
			t.Errorf("SetHTTPPool(%+v) accepted it", tt.p)
		}
	}
}

// SetHTTPPool replaces the pool: its settings reach the transport the
// tasks use from then on, and requests keep working.
func TestSetHTTPPool(t *testing.T) {
	t.Cleanup(func() { SetHTTPPool(DefaultHTTPPool) })
	p := HTTPPool{MaxIdlePerHost: 7, IdleTimeout: 5 * time.Second}
	if err := SetHTTPPool(p); err != nil {
		t.Fatal(err)
	}
	tr := httpClient().Transport.(*http.Transport)
	if tr.MaxIdleConnsPerHost != 7 || tr.IdleConnTimeout != 5*time.Second || !tr.ForceAttemptHTTP2 || tr.Proxy == nil {
		t.Errorf("transport: idle per host %d, idle timeout %v, h2 %v, proxy set %v",
			tr.MaxIdleConnsPerHost, tr.IdleConnTimeout, tr.ForceAttemptHTTP2, tr.Proxy != nil)
	}
	srv := newCountingServer(t, okHandler, false)
	task, _ := newHTTPTask(t, map[string]any{"url": srv.URL})
	if err := task.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// MaxConnsPerHost bounds the connections to one host: a burst of requests
// larger than the bound all succeed, over no more connections than it,
// and never more than it at once in the handler.
func TestHTTPMaxConnsPerHost(t *testing.T) {
	t.Cleanup(func() { SetHTTPPool(DefaultHTTPPool) })
	const bound, burst = 4, 40
	if err := SetHTTPPool(HTTPPool{MaxIdlePerHost: bound, IdleTimeout: time.Minute, MaxConnsPerHost: bound}); err != nil {
		t.Fatal(err)
	}
	var inFlight, most atomic.Int64
	srv := newCountingServer(t, func(w http.ResponseWriter, r *http.Request) {
		n := inFlight.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(2 * time.Millisecond) // overlap the requests; the bound holds whatever the timing
		inFlight.Add(-1)
		w.Write([]byte("ok\n"))
	}, false)
	task, _ := newHTTPTask(t, map[string]any{"url": srv.URL, "method": "POST", "body": "x"})
	var wg sync.WaitGroup
	errs := make(chan error, burst)
	for range burst {
		wg.Go(func() {
			if err := task.Run(context.Background()); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if c := srv.conns.Load(); c > bound {
		t.Errorf("%d concurrent requests opened %d connections, want at most %d", burst, c, bound)
	}
	if m := most.Load(); m > bound {
		t.Errorf("%d requests in the handler at once, want at most %d", m, bound)
	}
}
