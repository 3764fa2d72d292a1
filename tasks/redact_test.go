package tasks

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

func TestRedactURL(t *testing.T) {
	tests := []struct{ in, want string }{
		{"https://example.com/hook", "https://example.com/hook"},
		{"https://example.com/hook?api_key=s3cret", "https://example.com/hook?api_key=xxxxx"},
		{"https://example.com/hook?a=1&token=s3cret&b=", "https://example.com/hook?a=xxxxx&token=xxxxx&b=xxxxx"},
		{"https://example.com/hook?s3cret", "https://example.com/hook?xxxxx"},
		{"https://bob:s3cret@example.com/hook?key=s3cret#frag", "https://bob:xxxxx@example.com/hook?key=xxxxx#frag"},
		{"https://bob@example.com/", "https://bob@example.com/"},
		{"http://127.0.0.1:8080/a%20b?x=%2Fs3cret", "http://127.0.0.1:8080/a%20b?x=xxxxx"},
	}
	for _, tt := range tests {
		u, err := url.Parse(tt.in)
		if err != nil {
			t.Fatal(err)
		}
		if got := RedactURL(u); got != tt.want {
			t.Errorf("RedactURL(%s) = %s, want %s", tt.in, got, tt.want)
		}
		if got := RedactURLString(tt.in); got != tt.want {
			t.Errorf("RedactURLString(%s) = %s, want %s", tt.in, got, tt.want)
		}
	}
	if got := RedactURLString("http://bob:s3/cret@host"); strings.Contains(got, "s3") {
		t.Errorf("RedactURLString of an unparsable URL: %s", got)
	}
	if RedactURL(nil) != "" {
		t.Error("RedactURL(nil) is not empty")
	}
}

// An http task's URL is never quoted with its password or its query
// values: not in a load error, not in a run's error (which the history,
// the page and the API show), not in its log lines.
func TestHTTPRedactsURL(t *testing.T) {
	const secret = "s3cret"
	f, _ := Lookup("http")
	// url.Parse quotes a piece of the password when it holds a "/".
	for _, raw := range []string{"http://bob:" + secret + "/x@example.com/", "http://example.com:" + secret + "/?k=" + secret, "http://exa mple.com/?k=" + secret} {
		_, err := f(map[string]any{"url": raw}, nil)
		if err == nil || strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "s3cr") || !strings.Contains(err.Error(), `parameter "url"`) {
			t.Errorf("load error for %q: %v", raw, err)
		}
	}

	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://127.0.0.1:" + strings.Split(closed.Addr().String(), ":")[1]
	closed.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/redirect": // to a server that refuses, with a secret of its own
			http.Redirect(w, r, refused+"/next?sig="+secret, http.StatusFound)
		case "/slow":
			time.Sleep(time.Second)
		default:
			http.Error(w, "no", http.StatusForbidden)
		}
	}))
	defer srv.Close()
	for _, tt := range []struct{ name, url, timeout string }{
		{"connection refused", refused + "/hook?api_key=" + secret, "5s"},
		{"redirect refused", strings.Replace(srv.URL, "http://", "http://bob:"+secret+"@", 1) + "/redirect?api_key=" + secret, "5s"},
		{"status", srv.URL + "/hook?api_key=" + secret, "5s"},
		{"timeout", srv.URL + "/slow?api_key=" + secret, "100ms"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			task, err := f(map[string]any{"url": tt.url, "timeout": tt.timeout}, slog.New(slog.NewJSONHandler(&logs, nil)))
			if err != nil {
				t.Fatal(err)
			}
			err = task.Run(context.Background())
			if err == nil {
				t.Fatal("the run succeeded")
			}
			if strings.Contains(err.Error(), secret) || !strings.Contains(err.Error(), "api_key=xxxxx") {
				t.Errorf("run error: %v", err)
			}
			if strings.Contains(logs.String(), secret) || !strings.Contains(logs.String(), "api_key=xxxxx") {
				t.Errorf("log:\n%s", logs.String())
			}
		})
	}
}
