package tasks

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

func TestOutputKeepsTail(t *testing.T) {
	for _, tt := range []struct {
		limit  int
		writes []string
		want   string
	}{
		{8, nil, ""},
		{8, []string{"abc"}, "abc"},
		{8, []string{"abc", "defgh"}, "abcdefgh"},
		{8, []string{"abc", "defgh", "i"}, "…efghi"},
		{8, []string{"0123456789abcdef"}, "…bcdef"},
		{8, []string{"01", "23456789", "ab"}, "…789ab"},
		{0, []string{"dropped"}, ""},
		// A cut never leaves half a character; invalid bytes become U+FFFD,
		// and the result still fits the limit.
		{5, []string{"aé€x"}, "…x"},
		{7, []string{"aé€x", "y"}, "…xy"},
		{8, []string{"aé€x", "y"}, "aé€xy"},
		{8, []string{"a\xffb"}, "a\uFFFDb"},
		{8, []string{"\xffa\xffa\xff"}, "…a\uFFFD"},
		{11, []string{"\xffa\xffa\xff"}, "\uFFFDa\uFFFDa\uFFFD"},
	} {
		o := NewOutput(tt.limit)
		for _, w := range tt.writes {
			if n, err := o.Write([]byte(w)); n != len(w) || err != nil {
				t.Fatalf("Write = %d, %v", n, err)
			}
		}
		if got := o.String(); got != tt.want || len(got) > tt.limit {
			t.Errorf("limit %d, writes %q: %q, want %q", tt.limit, tt.writes, got, tt.want)
		}
		// WriteString keeps the same.
		o = NewOutput(tt.limit)
		for _, w := range tt.writes {
			o.WriteString(w)
		}
		if got := o.String(); got != tt.want {
			t.Errorf("limit %d, WriteString %q: %q, want %q", tt.limit, tt.writes, got, tt.want)
		}
	}
}

// A plugin writes to OutputFrom(ctx) whether or not the attempt keeps an
// output: a nil Output takes everything and keeps nothing.
func TestOutputNil(t *testing.T) {
	o := OutputFrom(context.Background())
	if o != nil {
		t.Fatalf("OutputFrom(Background) = %v", o)
	}
	if n, err := o.Write([]byte("x")); n != 1 || err != nil {
		t.Errorf("nil Write = %d, %v", n, err)
	}
	if n, err := o.WriteString("xy"); n != 2 || err != nil {
		t.Errorf("nil WriteString = %d, %v", n, err)
	}
	if o.Limit() != 0 || o.String() != "" {
		t.Errorf("nil Output: limit %d, %q", o.Limit(), o.String())
	}
	kept := NewOutput(10)
	if OutputFrom(WithOutput(context.Background(), kept)) != kept {
		t.Error("OutputFrom does not return the Output of WithOutput")
	}
}

// Writers may share an Output (a plugin's goroutines); run with -race.
func TestOutputConcurrent(t *testing.T) {
	o := NewOutput(64)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for range 100 {
				fmt.Fprintf(o, "writer %d\n", i)
			}
		})
	}
	wg.Wait()
	if s := o.String(); !strings.HasPrefix(s, "…") || len(s) > 64 {
		t.Errorf("output %q", s)
	}
}

// exec: the attempt's output is the tail of the capture the log gets,
// bounded by the Output's limit, whatever the command writes.
func TestExecOutputTail(t *testing.T) {
	task, rec := newExecTask(t, map[string]any{
		"command": shell(`i=0; while [ $i -lt 2000 ]; do echo "line $i"; i=$((i+1)); done; echo "<script>alert(1)</script>" >&2; exit 2`),
	})
	out := NewOutput(256)
	if err := task.Run(WithOutput(context.Background(), out)); err == nil {
		t.Fatal("Run succeeded")
	}
	s := out.String()
	if !strings.HasPrefix(s, "…") || len(s) > 256 || !utf8.ValidString(s) {
		t.Errorf("output is %d bytes: %q", len(s), s)
	}
	if !strings.HasSuffix(s, "line 1999\n<script>alert(1)</script>\n") {
		t.Errorf("output does not end with the command's last lines: %q", s)
	}
	if logged := rec.last(t)["output"].(string); !strings.HasSuffix(logged, s[len("…"):]) {
		t.Errorf("output %q is not the tail of the logged capture", s)
	}

	// A short output is kept whole; none is kept without an Output.
	task, _ = newExecTask(t, map[string]any{"command": shell("echo hello; echo oops >&2")})
	out = NewOutput(DefaultOutputTail)
	if err := task.Run(WithOutput(context.Background(), out)); err != nil {
		t.Fatal(err)
	}
	if out.String() != "hello\noops\n" {
		t.Errorf("output %q", out.String())
	}
}

// http: the attempt's output is the status line and the head of the body,
// as much as the Output keeps; never a request header.
func TestHTTPOutput(t *testing.T) {
	body := "<script>alert(1)</script>" + strings.Repeat("€", 2000) // 6,025 bytes
	srv, _ := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte(body))
	})
	task, _ := newHTTPTask(t, map[string]any{
		"url": srv.URL, "headers": map[string]any{"Authorization": "Bearer sekrit"},
	})
	out := NewOutput(300)
	err := task.Run(WithOutput(WithRun(context.Background(), testRun()), out))
	if err == nil {
		t.Fatal("Run succeeded on a 503")
	}
	s := out.String()
	const status = "HTTP/1.1 503 Service Unavailable\n"
	if !strings.HasPrefix(s, status+"<script>alert(1)</script>€€") || !strings.HasSuffix(s, "€…") ||
		len(s) > 300 || !utf8.ValidString(s) {
		t.Errorf("output is %d bytes: %q", len(s), s)
	}
	if strings.Contains(s, "sekrit") || strings.Contains(s, "Slotd-") {
		t.Errorf("output holds request headers: %q", s)
	}
	// The error still quotes the first KiB of the body only.
	if se := new(StatusError); !errors.As(err, &se) || len(se.Body) > bodyQuoteMax {
		t.Errorf("error %v", err)
	}

	// A larger limit than the error's quote gets more of the body.
	out = NewOutput(DefaultOutputTail)
	task.Run(WithOutput(context.Background(), out))
	if s := out.String(); len(s) < 4000 || len(s) > DefaultOutputTail {
		t.Errorf("output with limit %d is %d bytes", DefaultOutputTail, len(s))
	}

	// A short success is kept whole.
	ok, _ := newServer(t, func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("queued\n")) })
	task, _ = newHTTPTask(t, map[string]any{"url": ok.URL})
	out = NewOutput(DefaultOutputTail)
	if err := task.Run(WithOutput(context.Background(), out)); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); s != "HTTP/1.1 200 OK\nqueued\n" {
		t.Errorf("output %q", s)
	}
}

// A binary body, whose invalid bytes grow into U+FFFD, still leaves the
// status line in the output.
func TestHTTPOutputBinaryBody(t *testing.T) {
	srv, _ := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(strings.Repeat("\xffa", 3000)))
	})
	task, _ := newHTTPTask(t, map[string]any{"url": srv.URL})
	out := NewOutput(1000)
	if err := task.Run(WithOutput(context.Background(), out)); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); !strings.HasPrefix(s, "HTTP/1.1 200 OK\n\uFFFDa\uFFFDa") || !strings.HasSuffix(s, "…") || len(s) > 1000 {
		t.Errorf("output of %d bytes: %.40q...", len(s), s)
	}
}
