package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

func init() { Register("http", newHTTP) }

// DefaultHTTPTimeout is the default of the http plugin's timeout parameter.
const DefaultHTTPTimeout = 30 * time.Second

const (
	// bodyQuoteMax bounds the response body kept for errors and logs.
	bodyQuoteMax = 1 << 10
	// bodyDrainMax bounds what is read past that, so that the connection
	// returns to the pool (net/http reuses a connection only once its
	// response body was read to the end and closed); a larger body costs a
	// new connection, not memory or time.
	bodyDrainMax = 64 << 10
)

// slotHeaders are the headers Run sets from the slot's Run. They cannot be
// set through the headers parameter: the receiver must be able to trust them.
var slotHeaders = []string{
	"Slotd-Task", "Slotd-Slot", "Slotd-Slot-Time",
	"Slotd-Attempt", "Slotd-Fencing-Token", "Slotd-Replica", "Slotd-Store-Revision",
	"Slotd-Failure", "Slotd-Failure-Reason", "Slotd-Attempts", // an on_failure hook's (failure.go)
}

type httpParams struct {
	URL     string            `toml:"url"`
	Method  string            `toml:"method"`
	Headers map[string]string `toml:"headers"`
	Body    string            `toml:"body"`
	Timeout Duration          `toml:"timeout"`
	Expect  []int             `toml:"expect"`
	// FollowRedirects is "none", "same-host" (the default) or "any"
	// (httpredirect.go).
	FollowRedirects string `toml:"follow_redirects"`
}

type httpTask struct {
	url     *url.URL
	method  string
	header  http.Header
	host    string // a Host header, which net/http takes from Request.Host
	body    string
	timeout time.Duration
	expect  []int        // nil: any 2xx
	follow  string       // follow_redirects: RedirectsNone, RedirectsSameHost or RedirectsAny
	client  *http.Client // nil: the process's shared pool (httpClient); tests set their own
	log     *slog.Logger
}

func newHTTP(params map[string]any, log *slog.Logger) (Task, error) {
	p := httpParams{Method: http.MethodGet, Timeout: Duration{DefaultHTTPTimeout}}
	if err := Decode(params, &p); err != nil {
		return nil, fmt.Errorf("tasks: http: %w", err)
	}
	if p.URL == "" {
		return nil, errors.New(`tasks: http: parameter "url" is required`)
	}
	u, err := url.Parse(p.URL)
	if err != nil {
		// Not quoted: it may hold a password or a token.
		return nil, fmt.Errorf(`tasks: http: parameter "url" is not a valid URL (http[s]://host[:port]/path): %s`, parseErrorKind(err))
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf(`tasks: http: parameter "url": scheme must be http or https, not %q`, u.Scheme)
	}
	if u.Host == "" {
		return nil, fmt.Errorf(`tasks: http: parameter "url": no host in %q`, RedactURL(u))
	}
	// Methods are case-sensitive, but no operator who writes "post" means
	// anything other than POST.
	method := strings.ToUpper(p.Method)
	if !isToken(method) {
		return nil, fmt.Errorf(`tasks: http: parameter "method": bad method %q`, p.Method)
	}
	if p.Timeout.Duration <= 0 {
		return nil, fmt.Errorf(`tasks: http: parameter "timeout": must be positive, not %q`, p.Timeout)
	}
	if p.Expect != nil && len(p.Expect) == 0 {
		return nil, errors.New(`tasks: http: parameter "expect" is empty: no response could succeed`)
	}
	for _, code := range p.Expect {
		if code < 100 || code > 999 {
			return nil, fmt.Errorf(`tasks: http: parameter "expect": bad status code %d`, code)
		}
	}

	follow, err := parseRedirects(p.FollowRedirects)
	if err != nil {
		return nil, err
	}

	t := &httpTask{
		follow:  follow,
		url:     u,
		method:  method,
		header:  make(http.Header, len(p.Headers)),
		body:    p.Body,
		timeout: p.Timeout.Duration,
		expect:  p.Expect,
		log:     log,
	}
	for k, v := range p.Headers {
		if !isToken(k) {
			return nil, fmt.Errorf(`tasks: http: parameter "headers": bad header name %q`, k)
		}
		if strings.ContainsAny(v, "\r\n\x00") {
			return nil, fmt.Errorf(`tasks: http: parameter "headers": value of %s contains a line break or NUL`, k)
		}
		k = http.CanonicalHeaderKey(k)
		for _, h := range slotHeaders {
			if k == h {
				return nil, fmt.Errorf(`tasks: http: parameter "headers": %s is set by slotd`, k)
			}
		}
		if k == "Host" {
			t.host = v
			continue
		}
		t.header.Set(k, v)
	}
	if t.log == nil {
		t.log = slog.New(slog.DiscardHandler)
	}
	return t, nil
}

// isToken reports whether s is an HTTP token (RFC 9110 section 5.6.2), the
// syntax of both methods and header names.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// StatusError is the error of an http task whose response had a status it
// does not accept. Callers can record Body in history.
type StatusError struct {
	StatusCode int    // e.g. 503
	Status     string // e.g. "503 Service Unavailable"
	Body       string // the start of the response body, valid UTF-8
}

func (e *StatusError) Error() string {
	if e.Body == "" {
		return "status " + e.Status
	}
	return fmt.Sprintf("status %s; body: %q", e.Status, e.Body)
}

func (t *httpTask) accepts(code int) bool {
	if t.expect == nil {
		return 200 <= code && code <= 299
	}
	for _, c := range t.expect {
		if c == code {
			return true
		}
	}
	return false
}

// Run sends the request; the response's status decides success. The
// request, body included, must complete within the timeout. The status
// line and the head of the body go to the attempt's Output.
func (t *httpTask) Run(ctx context.Context) error {
	start := time.Now()
	target := t.method + " " + RedactURL(t.url)
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()

	reqBody := t.body
	failure, isHook := FailureFrom(parent)
	if isHook && reqBody == "" {
		// An on_failure webhook with no body of its own gets the failure.
		b, err := json.Marshal(failure)
		if err != nil {
			return fmt.Errorf("tasks: http: %s: %w", target, err)
		}
		reqBody = string(b)
	}
	req, err := http.NewRequestWithContext(ctx, t.method, t.url.String(), strings.NewReader(reqBody))
	if err != nil {
		return fmt.Errorf("tasks: http: %s: %w", target, err)
	}
	req.Header = t.header.Clone()
	if isHook {
		req.Header.Set("Slotd-Failure", failure.Kind)
		req.Header.Set("Slotd-Attempts", strconv.Itoa(failure.Attempts))
		if failure.Reason != "" {
			req.Header.Set("Slotd-Failure-Reason", failure.Reason)
		}
		if t.body == "" && req.Header.Get("Content-Type") == "" {
			req.Header.Set("Content-Type", "application/json")
		}
	}
	req.Host = t.host
	if r, ok := RunFrom(parent); ok {
		req.Header.Set("Slotd-Task", r.Task)
		req.Header.Set("Slotd-Slot", r.Slot)
		req.Header.Set("Slotd-Slot-Time", r.SlotTime.UTC().Format(time.RFC3339))
		req.Header.Set("Slotd-Attempt", strconv.Itoa(r.Attempt))
		req.Header.Set("Slotd-Fencing-Token", strconv.FormatInt(r.Token, 10))
		req.Header.Set("Slotd-Replica", r.Replica)
		if r.Revision != 0 {
			req.Header.Set("Slotd-Store-Revision", strconv.FormatInt(r.Revision, 10))
		}
	}

	// A shallow copy shares the pool; the redirect policy is the task's.
	client := t.client
	if client == nil {
		client = httpClient()
	}
	c := *client
	c.CheckRedirect = checkRedirect(t.follow)
	resp, err := c.Do(req)
	out := OutputFrom(parent)
	var body []byte
	if err == nil {
		body, err = io.ReadAll(io.LimitReader(resp.Body, int64(max(bodyQuoteMax, out.Limit()))))
		if err == nil {
			_, err = io.Copy(io.Discard, io.LimitReader(resp.Body, bodyDrainMax))
		}
		resp.Body.Close()
	}
	switch {
	case err == nil:
	case parent.Err() != nil:
		// The client reports a bare "context canceled"; the caller needs
		// to know why (a lost lease, shutdown).
		err = fmt.Errorf("tasks: http: %s: stopped: %w", target, context.Cause(parent))
	case ctx.Err() != nil:
		err = fmt.Errorf("tasks: http: %s: no response within %v: %w", target, t.timeout, context.DeadlineExceeded)
	default:
		// The client's *url.Error quotes the URL (or a redirect's) whole.
		err = fmt.Errorf("tasks: http: %s: %w", target, redactError(err))
	}
	if err != nil {
		t.log.LogAttrs(parent, slog.LevelWarn, "request failed",
			slog.Duration("duration", time.Since(start)), slog.Any("err", err))
		return err
	}

	writeResponse(out, resp, body)
	se := &StatusError{
		StatusCode: resp.StatusCode,
		Status:     resp.Status,
		Body:       strings.ToValidUTF8(string(body[:min(len(body), bodyQuoteMax)]), "\uFFFD"),
	}
	attrs := []slog.Attr{
		slog.Int("status_code", resp.StatusCode),
		slog.Duration("duration", time.Since(start)),
		slog.String("body", se.Body),
	}
	if t.accepts(resp.StatusCode) {
		t.log.LogAttrs(parent, slog.LevelInfo, "request succeeded", attrs...)
		return nil
	}
	err = fmt.Errorf("tasks: http: %s: %w", target, se)
	t.log.LogAttrs(parent, slog.LevelWarn, "request failed", append(attrs, slog.Any("err", err))...)
	return err
}

// writeResponse reports the response's status line and the head of its
// body, as much as out keeps, to the attempt's output; never a header.
// The body is made valid UTF-8 before it is fitted, so that the status
// line stays in; a cut body ends with "…".
func writeResponse(out *Output, resp *http.Response, body []byte) {
	if out.Limit() == 0 {
		return
	}
	status := resp.Proto + " " + resp.Status + "\n"
	text := strings.ToValidUTF8(string(body), "\uFFFD")
	if room := out.Limit() - len(status); len(text) > room {
		const cut = "…"
		n := max(room-len(cut), 0)
		for n > 0 && !utf8.RuneStart(text[n]) { // not in the middle of a character
			n--
		}
		text = text[:n] + cut
	}
	out.WriteString(status + text)
}
