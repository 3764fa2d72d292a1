package observe_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/observe"
	"github.com/slotd/slotd/lock"
)

// countingStore counts the fleet reads (States calls) and makes each
// slow enough for requests to overlap.
type countingStore struct {
	lock.Store
	reads atomic.Int64
}

func (c *countingStore) States(ctx context.Context, slots []lock.Slot) ([]lock.State, error) {
	c.reads.Add(1)
	time.Sleep(50 * time.Millisecond)
	return c.Store.States(ctx, slots)
}

// Concurrent requests of the page and the API share one read of the
// fleet; a read serves for ViewTTL, and ?n= is capped at MaxSlots.
func TestStatusViewShared(t *testing.T) {
	st := &countingStore{Store: lock.NewMemory(nil)}
	s := newServed(t, st)
	var wg sync.WaitGroup
	codes := make([]int, 20)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			path := "/"
			if i%2 == 1 {
				path = "/api/v1/tasks?n=3"
			}
			res, _ := s.getQuiet(path)
			codes[i] = res.StatusCode
		}()
	}
	wg.Wait()
	for i, c := range codes {
		if c != http.StatusOK {
			t.Errorf("request %d: %d", i, c)
		}
	}
	if n := st.reads.Load(); n != 1 {
		t.Errorf("20 concurrent requests read the fleet %d times, want 1", n)
	}
	s.get("/")
	if n := st.reads.Load(); n != 1 {
		t.Errorf("a request within ViewTTL read the fleet again (%d reads)", n)
	}
	time.Sleep(observe.ViewTTL + 50*time.Millisecond)
	_, body := s.get("/api/v1/tasks?n=100000")
	if n := st.reads.Load(); n != 2 {
		t.Errorf("after ViewTTL: %d reads, want 2", n)
	}
	var rep observe.StatusReport
	if err := json.Unmarshal([]byte(body), &rep); err != nil {
		t.Fatal(err)
	}
	if got := len(rep.Tasks[0].Slots); got != observe.MaxSlots {
		t.Errorf("?n=100000 showed %d slots, want the cap, %d", got, observe.MaxSlots)
	}
	// A read for many slots serves a request for fewer.
	_, body = s.get("/api/v1/tasks?n=4")
	rep = observe.StatusReport{}
	if err := json.Unmarshal([]byte(body), &rep); err != nil || len(rep.Tasks[0].Slots) != 4 || st.reads.Load() != 2 {
		t.Errorf("?n=4 after ?n=100000: %d slots, %d reads, %v", len(rep.Tasks[0].Slots), st.reads.Load(), err)
	}
}

// The page and the API set the security headers; the page's policy
// allows no script and only its own style block, by hash.
func TestSecurityHeaders(t *testing.T) {
	s := newServed(t, lock.NewMemory(nil))
	s.seed()
	for _, path := range []string{"/", "/api/v1/tasks", "/healthz", "/metrics", "/nosuchpage"} {
		res, body := s.get(path)
		for h, want := range map[string]string{
			"X-Content-Type-Options": "nosniff",
			"X-Frame-Options":        "DENY",
			"Referrer-Policy":        "no-referrer",
		} {
			if got := res.Header.Get(h); got != want {
				t.Errorf("GET %s: %s = %q, want %q", path, h, got, want)
			}
		}
		csp := res.Header.Get("Content-Security-Policy")
		for _, want := range []string{"default-src 'none'", "frame-ancestors 'none'", "base-uri 'none'", "form-action 'none'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("GET %s: Content-Security-Policy %q lacks %s", path, csp, want)
			}
		}
		if strings.Contains(csp, "unsafe") || strings.Contains(csp, "script-src") {
			t.Errorf("GET %s: Content-Security-Policy %q allows more than it must", path, csp)
		}
		if path != "/" {
			continue
		}
		if strings.Contains(body, "<script") || strings.Contains(body, " style=") || strings.Contains(body, " on") && regexp.MustCompile(`\son[a-z]+=`).MatchString(body) {
			t.Errorf("the page holds a script, a style attribute or an event handler, which its policy blocks")
		}
		styles := regexp.MustCompile(`(?s)<style>(.*?)</style>`).FindAllStringSubmatch(body, -1)
		if len(styles) != 1 {
			t.Fatalf("the page has %d <style> elements, want 1", len(styles))
		}
		sum := sha256.Sum256([]byte(styles[0][1]))
		if hash := "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"; !strings.Contains(csp, "style-src "+hash) {
			t.Errorf("Content-Security-Policy %q does not allow the page's style block (%s)", csp, hash)
		}
	}
}
