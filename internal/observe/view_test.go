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
	"github.com/slotd/slotd/lock/memlock"
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

// Concurrent requests of the API share one read of the fleet, and so do
// concurrent requests of the overview's pages, whatever their filter; a
// read serves for ViewTTL, and ?n= is capped at MaxSlots.
func TestStatusViewShared(t *testing.T) {
	st := &countingStore{Store: memlock.New(nil)}
	s := newServed(t, st)
	for _, paths := range [][]string{
		{"/api/v1/tasks", "/api/v1/tasks?n=3"},
		{"/", "/?state=failing&q=rep", "/?page=2&per=1"},
	} {
		before := st.reads.Load()
		var wg sync.WaitGroup
		codes := make([]int, 20)
		for i := range codes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, _ := s.getQuiet(paths[i%len(paths)])
				codes[i] = res.StatusCode
			}()
		}
		wg.Wait()
		for i, c := range codes {
			if c != http.StatusOK {
				t.Errorf("request %d of %v: %d", i, paths, c)
			}
		}
		if n := st.reads.Load() - before; n != 1 {
			t.Errorf("20 concurrent requests of %v read the fleet %d times, want 1", paths, n)
		}
	}
	reads := st.reads.Load()
	s.get("/api/v1/tasks")
	if n := st.reads.Load(); n != reads {
		t.Errorf("a request within ViewTTL read the fleet again (%d reads, want %d)", n, reads)
	}
	time.Sleep(observe.ViewTTL + 50*time.Millisecond)
	_, body := s.get("/api/v1/tasks?n=100000")
	if n := st.reads.Load(); n != reads+1 {
		t.Errorf("after ViewTTL: %d reads, want %d", n, reads+1)
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
	if err := json.Unmarshal([]byte(body), &rep); err != nil || len(rep.Tasks[0].Slots) != 4 || st.reads.Load() != reads+1 {
		t.Errorf("?n=4 after ?n=100000: %d slots, %d reads, %v", len(rep.Tasks[0].Slots), st.reads.Load(), err)
	}
}

// Every response carries the security headers; the policy allows only
// the pages' style sheet, by hash, and forms to this server; a task's page
// adds its one script, by hash, and calls to this server.
func TestSecurityHeaders(t *testing.T) {
	s := newServed(t, memlock.New(nil))
	s.seed()
	for _, path := range []string{"/", "/tasks/report", "/tasks/nosuchtask", "/api/v1/tasks", "/api/v1/tasks/report", "/healthz", "/metrics", "/nosuchpage"} {
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
		for _, want := range []string{"default-src 'none'", "frame-ancestors 'none'", "base-uri 'none'", "form-action 'self'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("GET %s: Content-Security-Policy %q lacks %s", path, csp, want)
			}
		}
		task := path == "/tasks/report"
		if strings.Contains(csp, "unsafe") || strings.Contains(csp, "*") || !task && (strings.Contains(csp, "script-src") || strings.Contains(csp, "connect-src")) {
			t.Errorf("GET %s: Content-Security-Policy %q allows more than it must", path, csp)
		}
		if !strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") {
			continue
		}
		if strings.Contains(body, " style=") || regexp.MustCompile(`\son[a-z]+=`).MatchString(body) {
			t.Errorf("GET %s holds a style attribute or an event handler, which its policy blocks", path)
		}
		styles := regexp.MustCompile(`(?s)<style>(.*?)</style>`).FindAllStringSubmatch(body, -1)
		if len(styles) != 1 {
			t.Fatalf("GET %s has %d <style> elements, want 1", path, len(styles))
		}
		if hash := hashSource(styles[0][1]); !strings.Contains(csp, "style-src "+hash) {
			t.Errorf("Content-Security-Policy %q does not allow the style block of %s (%s)", csp, path, hash)
		}
		scripts := regexp.MustCompile(`(?s)<script>(.*?)</script>`).FindAllStringSubmatch(body, -1)
		switch {
		case !task && strings.Contains(body, "<script"):
			t.Errorf("GET %s holds a script", path)
		case task && len(scripts) != 1:
			t.Errorf("GET %s has %d scripts, want 1", path, len(scripts))
		case task:
			if hash := hashSource(scripts[0][1]); !strings.Contains(csp, "script-src "+hash+"; connect-src 'self'") {
				t.Errorf("Content-Security-Policy %q does not allow the script of %s (%s), or more", csp, path, hash)
			}
		}
	}
}

// hashSource is the CSP source of an inline element whose text is src.
func hashSource(src string) string {
	sum := sha256.Sum256([]byte(src))
	return "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
}
