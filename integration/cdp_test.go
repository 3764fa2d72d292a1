package integration

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// browser is headless chromium driven through the DevTools protocol over
// a pipe (--remote-debugging-pipe: JSON messages ending in a NUL byte on
// descriptors 3 and 4), so that a test can click, type, read the DOM and
// take screenshots with nothing but the standard library. One page (tab)
// is attached; every call waits for its answer.
type browser struct {
	t       *testing.T
	cmd     *exec.Cmd
	w       io.WriteCloser
	session string // the attached page's

	mu      sync.Mutex
	next    int
	pending map[int]chan cdpReply
	dead    error // set when the pipe closes
}

// cdpReply is a message from the browser: an answer (ID set) or an event.
type cdpReply struct {
	ID     int             `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// startBrowser starts chromium and attaches to a page of width × height
// CSS pixels. The browser runs in a process group of its own, killed at
// the test's end so that none of its helpers outlive it.
func startBrowser(t *testing.T, bin string, width, height int) *browser {
	t.Helper()
	toChrome, chromeIn, err := os.Pipe() // chromium reads fd 3
	if err != nil {
		t.Fatal(err)
	}
	chromeOut, fromChrome, err := os.Pipe() // chromium writes fd 4
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	cmd := exec.Command(bin,
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
		"--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--hide-scrollbars", "--remote-debugging-pipe", "--user-data-dir="+t.TempDir(), "about:blank")
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+home, "XDG_CACHE_HOME="+home)
	cmd.ExtraFiles = []*os.File{toChrome, fromChrome}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	toChrome.Close()
	fromChrome.Close()
	b := &browser{t: t, cmd: cmd, w: chromeIn, pending: map[int]chan cdpReply{}}
	done := make(chan struct{})
	go b.read(chromeOut, done)
	t.Cleanup(func() {
		chromeIn.Close()
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		chromeOut.Close()
		<-done
		if t.Failed() {
			t.Logf("chromium's stderr:\n%s", tail(stderr.String(), 20))
		}
	})

	var targets struct {
		TargetInfos []struct {
			TargetID string `json:"targetId"`
			Type     string `json:"type"`
		} `json:"targetInfos"`
	}
	b.call("", "Target.getTargets", nil, &targets)
	var page string
	for _, ti := range targets.TargetInfos {
		if ti.Type == "page" {
			page = ti.TargetID
			break
		}
	}
	if page == "" {
		var created struct {
			TargetID string `json:"targetId"`
		}
		b.call("", "Target.createTarget", map[string]any{"url": "about:blank"}, &created)
		page = created.TargetID
	}
	var attached struct {
		SessionID string `json:"sessionId"`
	}
	b.call("", "Target.attachToTarget", map[string]any{"targetId": page, "flatten": true}, &attached)
	b.session = attached.SessionID
	b.call(b.session, "Page.enable", nil, nil)
	b.call(b.session, "Emulation.setDeviceMetricsOverride", map[string]any{
		"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false,
	}, nil)
	// Every document reports the Content-Security-Policy violations it
	// meets, which the page's own policy would otherwise only log.
	b.call(b.session, "Page.addScriptToEvaluateOnNewDocument", map[string]any{"source": `
		window.__cspViolations = [];
		document.addEventListener("securitypolicyviolation", function (e) {
			window.__cspViolations.push(e.violatedDirective + " " + (e.blockedURI || "inline"));
		});`}, nil)
	return b
}

// read hands each answer to its caller until the pipe closes.
func (b *browser) read(r io.Reader, done chan<- struct{}) {
	defer close(done)
	br := bufio.NewReaderSize(r, 1<<20)
	for {
		msg, err := br.ReadBytes(0)
		if err != nil {
			b.mu.Lock()
			b.dead = fmt.Errorf("chromium's pipe closed: %w", err)
			for id, c := range b.pending {
				close(c)
				delete(b.pending, id)
			}
			b.mu.Unlock()
			return
		}
		var rep cdpReply
		if json.Unmarshal(msg[:len(msg)-1], &rep) != nil || rep.ID == 0 {
			continue // an event: none is awaited
		}
		b.mu.Lock()
		c := b.pending[rep.ID]
		delete(b.pending, rep.ID)
		b.mu.Unlock()
		if c != nil {
			c <- rep
		}
	}
}

// call sends method with params to the browser (session "") or the page,
// waits up to 20 s for the answer and decodes its result into out.
func (b *browser) call(session, method string, params any, out any) {
	b.t.Helper()
	if err := b.try(session, method, params, out); err != nil {
		b.t.Fatalf("chromium %s: %v", method, err)
	}
}

func (b *browser) try(session, method string, params any, out any) error {
	b.mu.Lock()
	if b.dead != nil {
		b.mu.Unlock()
		return b.dead
	}
	b.next++
	id := b.next
	c := make(chan cdpReply, 1)
	b.pending[id] = c
	b.mu.Unlock()
	msg := map[string]any{"id": id, "method": method}
	if params != nil {
		msg["params"] = params
	}
	if session != "" {
		msg["sessionId"] = session
	}
	data, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	if _, err := b.w.Write(append(data, 0)); err != nil {
		return err
	}
	select {
	case rep, ok := <-c:
		switch {
		case !ok:
			return b.dead
		case rep.Error != nil:
			return fmt.Errorf("%s", rep.Error.Message)
		case out != nil:
			return json.Unmarshal(rep.Result, out)
		}
		return nil
	case <-time.After(20 * time.Second):
		return fmt.Errorf("no answer in 20s")
	}
}

// eval evaluates the JavaScript expression js in the page, awaiting a
// promise, and decodes its value into out (if not nil).
func (b *browser) eval(js string, out any) {
	b.t.Helper()
	if err := b.tryEval(js, out); err != nil {
		b.t.Fatal(err)
	}
}

// navigated is Chromium's answer to an evaluation that a navigation of the
// page cut short.
const navigated = "Inspected target navigated or closed"

// tryEval is eval, returning what went wrong.
func (b *browser) tryEval(js string, out any) error {
	var res struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	if err := b.try(b.session, "Runtime.evaluate", map[string]any{"expression": js, "returnByValue": true, "awaitPromise": true}, &res); err != nil {
		return fmt.Errorf("chromium Runtime.evaluate: %w", err)
	}
	if e := res.ExceptionDetails; e != nil {
		return fmt.Errorf("evaluating %s: %s %s", js, e.Text, e.Exception.Description)
	}
	if out != nil {
		if err := json.Unmarshal(res.Result.Value, out); err != nil {
			return fmt.Errorf("evaluating %s: %v (%s)", js, err, res.Result.Value)
		}
	}
	return nil
}

// text is eval of an expression whose value is a string.
func (b *browser) text(js string) string {
	b.t.Helper()
	var s string
	b.eval(js, &s)
	return s
}

// navigate loads url and waits until its document is complete; it returns
// how long the navigation took by the page's own clock (navigation start
// to load event end).
func (b *browser) navigate(url string) time.Duration {
	b.t.Helper()
	var nav struct {
		ErrorText string `json:"errorText"`
	}
	b.call(b.session, "Page.navigate", map[string]any{"url": url}, &nav)
	if nav.ErrorText != "" {
		b.t.Fatalf("navigate to %s: %s", url, nav.ErrorText)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		var ms float64
		b.eval(`(function () {
			var n = performance.getEntriesByType("navigation")[0];
			return document.readyState === "complete" && n && n.loadEventEnd > 0 && location.href !== "about:blank" ? n.loadEventEnd : -1;
		})()`, &ms)
		if ms >= 0 {
			return time.Duration(ms * float64(time.Millisecond))
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("%s did not finish loading in 20s", url)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// await polls the JavaScript expression js until it is true.
func (b *browser) await(what, js string) {
	b.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		// An evaluation that the awaited navigation cuts short is a "not
		// yet".
		var ok bool
		if err := b.tryEval("!!("+js+")", &ok); err != nil && !strings.Contains(err.Error(), navigated) {
			b.t.Fatal(err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("waited 10s for %s (%s); the page says:\n%s", what, js, tail(b.text("document.body.innerText"), 30))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// typeText types s into the element selector names, as a user would.
func (b *browser) typeText(selector, s string) {
	b.t.Helper()
	b.eval(`document.querySelector(`+jsString(selector)+`).focus()`, nil)
	b.call(b.session, "Input.insertText", map[string]any{"text": s}, nil)
}

// cspViolations returns what the page's policy blocked since it loaded.
func (b *browser) cspViolations() []string {
	b.t.Helper()
	var v []string
	b.eval("window.__cspViolations || []", &v)
	return v
}

// screenshot returns a PNG of the whole page.
func (b *browser) screenshot() []byte {
	b.t.Helper()
	var metrics struct {
		CSSContentSize struct {
			Width  float64 `json:"width"`
			Height float64 `json:"height"`
		} `json:"cssContentSize"`
	}
	b.call(b.session, "Page.getLayoutMetrics", nil, &metrics)
	var shot struct {
		Data string `json:"data"`
	}
	b.call(b.session, "Page.captureScreenshot", map[string]any{
		"format": "png", "captureBeyondViewport": true,
		"clip": map[string]any{"x": 0, "y": 0, "width": metrics.CSSContentSize.Width,
			"height": min(metrics.CSSContentSize.Height, 4000), "scale": 1},
	}, &shot)
	png, err := base64.StdEncoding.DecodeString(shot.Data)
	if err != nil {
		b.t.Fatal(err)
	}
	return png
}

// jsString is s as a JavaScript string literal.
func jsString(s string) string {
	q, _ := json.Marshal(s)
	return strings.ReplaceAll(string(q), "\u2028", `\u2028`)
}
