package tasks

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// newServerOn is newServer listening on host (a loopback address other
// than 127.0.0.1 is another host to the client: 127.0.0.2 on Linux).
func newServerOn(t *testing.T, host string, handler http.HandlerFunc) (*httptest.Server, <-chan request) {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Skipf("no loopback address %s: %v", host, err)
	}
	reqs := make(chan request, 10)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		reqs <- request{r.Method, r.URL.RequestURI(), r.Host, string(body), r.Header}
		handler(w, r)
	}))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, reqs
}

func redirectTo(target string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/start" {
			http.Redirect(w, r, target, http.StatusTemporaryRedirect)
		}
	}
}

// Issue 26 item 2: the http plugin (and so an http on_failure hook)
// followed a redirect to any host, sending the task's X-Api-Key and,
// as Referer, the task's URL with its query secret. Now: no Referer on
// any hop; the default follows a redirect only to the task's own origin
// (scheme, host and port: another port is another host); "none" follows
// none; "any" follows anywhere but drops the configured headers, bar a
// few that describe the request, on a hop to another origin.
func TestHTTPRedirectCarriesNoSecret(t *testing.T) {
	other, otherReqs := newServerOn(t, "127.0.0.2", func(w http.ResponseWriter, r *http.Request) {})
	otherPort, otherPortReqs := newServer(t, func(w http.ResponseWriter, r *http.Request) {})
	headers := map[string]any{"X-Api-Key": "k3y-s3cret", "Authorization": "Bearer b34rer", "Content-Type": "application/json"}

	for _, tc := range []struct {
		name, policy, target string
		otherReqs            <-chan request // where target is served; nil: the origin itself
		wantErr              string         // "" for success
		wantForwarded        bool           // the hop reaches target
		wantSecrets          bool           // ... with the configured credentials
	}{
		{"default, another host", "", other.URL + "/next", otherReqs, "redirect to another host refused", false, false},
		{"default, another port", "", otherPort.URL + "/next", otherPortReqs, "redirect to another host refused", false, false},
		{"same-host, same origin", "same-host", "/next", nil, "", true, true},
		{"none, same origin", "none", "/next", nil, "status 307", false, false},
		{"none, another host", "none", other.URL + "/next", otherReqs, "status 307", false, false},
		{"any, another host", "any", other.URL + "/next", otherReqs, "", true, false},
		{"any, same origin", "any", "/next", nil, "", true, true},
	} {
		for _, hook := range []bool{false, true} {
			name := tc.name
			if hook {
				name += ", on_failure hook"
			}
			t.Run(name, func(t *testing.T) {
				origin, originReqs := newServer(t, redirectTo(tc.target))
				params := map[string]any{"url": origin.URL + "/start?token=q-s3cret", "method": "POST", "headers": headers}
				if tc.policy != "" {
					params["follow_redirects"] = tc.policy
				}
				task, _ := newHTTPTask(t, params)
				ctx := WithRun(context.Background(), testRun())
				if hook {
					ctx = WithFailure(ctx, Failure{Kind: FailureExhausted, Task: "report", Attempts: 3})
				}
				err := task.Run(ctx)
				switch {
				case tc.wantErr == "" && err != nil:
					t.Fatalf("Run = %v", err)
				case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
					t.Fatalf("Run = %v, want an error containing %q", err, tc.wantErr)
				case err != nil && strings.Contains(err.Error(), "s3cret"):
					t.Errorf("the error quotes a secret: %v", err)
				}
				<-originReqs // the task's own request
				hops := originReqs
				if tc.otherReqs != nil {
					hops = tc.otherReqs
				}
				select {
				case r := <-hops:
					if !tc.wantForwarded {
						t.Fatalf("the redirect was followed: %+v", r)
					}
					if ref := r.header.Get("Referer"); ref != "" {
						t.Errorf("the hop carries Referer %q", ref)
					}
					gotKey, gotAuth := r.header.Get("X-Api-Key") != "", r.header.Get("Authorization") != ""
					if gotKey != tc.wantSecrets || gotAuth != tc.wantSecrets {
						t.Errorf("the hop carries X-Api-Key %v, Authorization %v; want %v", gotKey, gotAuth, tc.wantSecrets)
					}
					if r.header.Get("Content-Type") != "application/json" || r.header.Get("Slotd-Task") != "report" {
						t.Errorf("the hop lost a plain header: %v", r.header)
					}
					if r.method != "POST" || r.path != "/next" {
						t.Errorf("the hop is %s %s, want POST /next (307 keeps the method)", r.method, r.path)
					}
				default:
					if tc.wantForwarded {
						t.Fatal("the redirect was not followed")
					}
				}
			})
		}
	}
}

func TestHTTPRedirectParam(t *testing.T) {
	f, _ := Lookup("http")
	_, err := f(map[string]any{"url": "http://127.0.0.1:1/", "follow_redirects": "sometimes"}, nil)
	if err == nil || !strings.Contains(err.Error(), `parameter "follow_redirects": "sometimes"`) {
		t.Errorf("factory = %v, want the bad value named", err)
	}
	_, err = f(map[string]any{"url": "http://127.0.0.1:1/", "follow_redirects": true}, nil)
	if err == nil || !strings.Contains(err.Error(), `follow_redirects`) {
		t.Errorf("factory = %v, want the key named", err)
	}
}

// A redirect loop on one origin stops after maxRedirects hops.
func TestHTTPRedirectLoop(t *testing.T) {
	srv, _ := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/again", http.StatusFound)
	})
	task, _ := newHTTPTask(t, map[string]any{"url": srv.URL})
	err := task.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "stopped after 10 redirects") {
		t.Errorf("Run = %v", err)
	}
	if errors.Is(err, errRedirectRefused) {
		t.Errorf("a loop on one origin reported as another host: %v", err)
	}
}
