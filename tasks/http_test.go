package tasks

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestHTTPParams(t *testing.T) {
	const u = "http://127.0.0.1:1/hook"
	tests := []struct {
		name    string
		params  map[string]any
		wantErr string // substring; "" means the factory succeeds
	}{
		{"minimal", map[string]any{"url": u}, ""},
		{"all params", map[string]any{
			"url": "https://example.com/x?y=1", "method": "post", "headers": map[string]any{"X-A": "1", "Host": "h"},
			"body": "{}", "timeout": "5s", "expect": []any{int64(200), int64(204)},
		}, ""},
		{"nil params", nil, `parameter "url" is required`},
		{"no url", map[string]any{"method": "GET"}, `parameter "url" is required`},
		{"misspelt", map[string]any{"url": u, "methd": "GET"}, `unknown parameter "methd"`},
		{"url not a string", map[string]any{"url": int64(1)}, `parameter "url"`},
		{"unparsable url", map[string]any{"url": "http://[::1"}, `parameter "url"`},
		{"no scheme", map[string]any{"url": "example.com/x"}, `parameter "url": scheme`},
		{"ftp", map[string]any{"url": "ftp://example.com/x"}, `parameter "url": scheme`},
		{"no host", map[string]any{"url": "http:///x"}, `parameter "url": no host`},
		{"bad method", map[string]any{"url": u, "method": "GE T"}, `parameter "method"`},
		{"empty method", map[string]any{"url": u, "method": ""}, `parameter "method"`},
		{"method not a string", map[string]any{"url": u, "method": []any{"GET"}}, `parameter "method"`},
		{"headers not a table", map[string]any{"url": u, "headers": "X-A: 1"}, `parameter "headers"`},
		{"header value not a string", map[string]any{"url": u, "headers": map[string]any{"X-A": int64(1)}}, `parameter "headers"`},
		{"bad header name", map[string]any{"url": u, "headers": map[string]any{"X A": "1"}}, `parameter "headers"`},
		{"header value with newline", map[string]any{"url": u, "headers": map[string]any{"X-A": "1\r\nX-B: 2"}}, `parameter "headers"`},
		{"slot header", map[string]any{"url": u, "headers": map[string]any{"slotd-fencing-token": "1"}}, `parameter "headers": Slotd-Fencing-Token`},
		{"body not a string", map[string]any{"url": u, "body": map[string]any{}}, `parameter "body"`},
		{"bad timeout", map[string]any{"url": u, "timeout": "soon"}, `parameter "timeout"`},
		{"zero timeout", map[string]any{"url": u, "timeout": "0s"}, `parameter "timeout"`},
		{"negative timeout", map[string]any{"url": u, "timeout": "-1s"}, `parameter "timeout"`},
		{"expect not an array", map[string]any{"url": u, "expect": int64(200)}, `parameter "expect"`},
		{"expect strings", map[string]any{"url": u, "expect": []any{"200"}}, `parameter "expect"`},
		{"expect empty", map[string]any{"url": u, "expect": []any{}}, `parameter "expect" is empty`},
		{"expect out of range", map[string]any{"url": u, "expect": []any{int64(42)}}, `parameter "expect"`},
	}
	f, _ := Lookup("http")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			task, err := f(tt.params, nil)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("factory: %v", err)
			case tt.wantErr == "" && task == nil:
				t.Fatal("factory returned no task")
			case tt.wantErr != "" && err == nil:
				t.Fatalf("factory succeeded, want error containing %q", tt.wantErr)
			case tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr):
				t.Fatalf("error %q does not contain %q", err, tt.wantErr)
			case err != nil && !strings.HasPrefix(err.Error(), "tasks: http: "):
				t.Fatalf("error %q lacks the package prefix", err)
			}
		})
	}
}

// request is what a test server saw.
type request struct {
	method, path, host, body string
	header                   http.Header
}

// newServer starts a loopback server that records each request into the
// returned channel and answers with handler.
func newServer(t *testing.T, handler http.HandlerFunc) (*httptest.Server, <-chan request) {
	t.Helper()
	reqs := make(chan request, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		reqs <- request{r.Method, r.URL.RequestURI(), r.Host, string(body), r.Header}
		handler(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, reqs
}

func newHTTPTask(t *testing.T, params map[string]any) (Task, *logRecorder) {
	t.Helper()
	log, rec := newLogRecorder()
	f, _ := Lookup("http")
	task, err := f(params, log)
	if err != nil {
		t.Fatal(err)
	}
	return task, rec
}

func TestHTTPRequest(t *testing.T) {
	srv, reqs := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusAccepted)
		io.WriteString(w, "queued")
	})
	task, rec := newHTTPTask(t, map[string]any{
		"url":     srv.URL + "/hook?x=1",
		"method":  "put",
		"headers": map[string]any{"Authorization": "Bearer t", "content-type": "application/json", "Host": "jobs.example"},
		"body":    `{"a":1}`,
	})
	if err := task.Run(WithRun(context.Background(), testRun())); err != nil {
		t.Fatalf("Run: %v", err)
	}
	r := <-reqs
	if r.method != "PUT" || r.path != "/hook?x=1" || r.body != `{"a":1}` || r.host != "jobs.example" {
		t.Errorf("request %+v", r)
	}
	for k, v := range map[string]string{
		"Authorization":       "Bearer t",
		"Content-Type":        "application/json",
		"Slotd-Task":          "report",
		"Slotd-Slot":          "2024011514",
		"Slotd-Slot-Time":     "2024-01-15T14:00:00Z",
		"Slotd-Attempt":       "2",
		"Slotd-Fencing-Token": "1705327200002",
		"Slotd-Replica":       "host-a-42",
	} {
		if got := r.header.Get(k); got != v {
			t.Errorf("header %s = %q, want %q", k, got, v)
		}
	}
	if l := rec.last(t); l["level"] != "INFO" || l["status_code"] != 202.0 || l["body"] != "queued" {
		t.Errorf("log record %v", l)
	}
}

func TestHTTPDefaults(t *testing.T) {
	srv, reqs := newServer(t, func(w http.ResponseWriter, r *http.Request) {})
	task, _ := newHTTPTask(t, map[string]any{"url": srv.URL})
	if err := task.Run(context.Background()); err != nil {
		t.Fatalf("Run: %v", err)
	}
	r := <-reqs
	if r.method != "GET" || r.body != "" || r.header.Get("Slotd-Slot") != "" {
		t.Errorf("request %+v", r)
	}
}

func TestHTTPServerError(t *testing.T) {
	srv, _ := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "database is down"+strings.Repeat(".", 5000), http.StatusInternalServerError)
	})
	task, rec := newHTTPTask(t, map[string]any{"url": srv.URL})
	err := task.Run(context.Background())
	var se *StatusError
	if !errors.As(err, &se) {
		t.Fatalf("Run = %v, want a *StatusError", err)
	}
	if se.StatusCode != 500 || !strings.HasPrefix(se.Body, "database is down") || len(se.Body) != bodyQuoteMax {
		t.Errorf("StatusError{%d, %q, %d bytes of body}", se.StatusCode, se.Status, len(se.Body))
	}
	for _, s := range []string{"tasks: http: GET " + srv.URL, "500 Internal Server Error", "database is down"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not contain %q", err, s)
		}
	}
	if l := rec.last(t); l["level"] != "WARN" || l["status_code"] != 500.0 {
		t.Errorf("log record %v", l)
	}
}

func TestHTTPExpect(t *testing.T) {
	srv, _ := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})
	tests := []struct {
		expect []any
		ok     bool
	}{
		{nil, true},
		{[]any{int64(204)}, true},
		{[]any{int64(200), int64(204)}, true},
		{[]any{int64(200)}, false},
	}
	for _, tt := range tests {
		params := map[string]any{"url": srv.URL}
		if tt.expect != nil {
			params["expect"] = tt.expect
		}
		task, _ := newHTTPTask(t, params)
		err := task.Run(context.Background())
		if (err == nil) != tt.ok {
			t.Errorf("expect %v: Run = %v", tt.expect, err)
		}
	}

	srv404, _ := newServer(t, func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) })
	task, _ := newHTTPTask(t, map[string]any{"url": srv404.URL, "expect": []any{int64(404)}})
	if err := task.Run(context.Background()); err != nil {
		t.Errorf("expect [404]: Run = %v", err)
	}
}

func TestHTTPTimeout(t *testing.T) {
	srv, _ := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // hang until the client gives up
	})
	task, _ := newHTTPTask(t, map[string]any{"url": srv.URL, "timeout": "200ms"})
	start := time.Now()
	err := task.Run(context.Background())
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "no response within 200ms") {
		t.Errorf("Run = %v, want a timeout", err)
	}
	if d := time.Since(start); d < 200*time.Millisecond || d > 10*time.Second {
		t.Errorf("Run took %v", d)
	}
}

func TestHTTPCancel(t *testing.T) {
	srv, reqs := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	})
	task, _ := newHTTPTask(t, map[string]any{"url": srv.URL})
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan error, 1)
	go func() { done <- task.Run(ctx) }()
	<-reqs // the request is in flight
	cancel(errTestLeaseLost)
	if err := <-done; !errors.Is(err, errTestLeaseLost) {
		t.Errorf("Run = %v, want it to wrap the cancel cause", err)
	}
}

func TestHTTPUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens there any more
	task, rec := newHTTPTask(t, map[string]any{"url": url})
	err := task.Run(context.Background())
	if err == nil || !strings.HasPrefix(err.Error(), "tasks: http: GET "+url) {
		t.Errorf("Run = %v", err)
	}
	if l := rec.last(t); l["level"] != "WARN" {
		t.Errorf("log record %v", l)
	}
}
