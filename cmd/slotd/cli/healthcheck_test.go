package cli

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/observe"
	"github.com/slotd/slotd/lock/memlock"
	"github.com/slotd/slotd/scheduler"
)

func TestHealthcheckDefaultURLIsDaemonDefault(t *testing.T) {
	t.Parallel()
	if defaultHealthURL != "http://127.0.0.1:9464/healthz" {
		t.Errorf("default -url %q, want /healthz on the default listen address 127.0.0.1:9464", defaultHealthURL)
	}
}

// healthcheck against the daemon's own handler: healthy on /healthz, and
// unhealthy on a non-2xx answer, on no answer, and on a slow answer.
func TestHealthcheck(t *testing.T) {
	t.Parallel()
	store := memlock.New(nil)
	daemon := httptest.NewServer(observe.Handler(observe.Daemon{Scheduler: scheduler.New(nil, store), Store: store}))
	defer daemon.Close()
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer slow.Close()
	defer close(release)
	// A port nothing listens on: listen, note it, close.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String() + "/healthz"
	ln.Close()

	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{"healthz", []string{"-url", daemon.URL + "/healthz"}, exitOK, "healthy: ", ""},
		{"404", []string{"-url", daemon.URL + "/nope"}, exitError, "", "404 Not Found"},
		{"refused", []string{"-url", closed}, exitError, "", "unhealthy"},
		{"slow", []string{"-url", slow.URL, "-timeout", "200ms"}, exitError, "", "deadline exceeded"},
		{"bad url", []string{"-url", "::nope"}, exitUsage, "", "-url"},
		{"bad timeout", []string{"-timeout", "0s"}, exitUsage, "", "must be positive"},
		{"argument", []string{"extra"}, exitUsage, "", `unexpected argument "extra"`},
		{"unknown flag", []string{"-config", "x"}, exitUsage, "", "flag provided but not defined"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			code := Main(ctx, append([]string{"healthcheck"}, tc.args...), &out, &errOut)
			if code != tc.code {
				t.Errorf("exit %d, want %d; stdout %q stderr %q", code, tc.code, out.String(), errOut.String())
			}
			if !strings.Contains(out.String(), tc.stdout) || !strings.Contains(errOut.String(), tc.stderr) {
				t.Errorf("stdout %q (want %q), stderr %q (want %q)", out.String(), tc.stdout, errOut.String(), tc.stderr)
			}
		})
	}
}
