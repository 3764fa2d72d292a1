package integration

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
)

// Issue 26 item 8: a double click on Run now across a second boundary
// started two runs: the page sent no idempotency key, and the store
// coalesces triggers only within one second. The page sends one key per
// action: the clicks of a double click share it; a click a while later
// (the page's clock moved on by 10 s) sends a new one.
func TestRunNowDoubleClickSendsOneKey(t *testing.T) {
	bin := chromium(t)
	var mu sync.Mutex
	var keys []string
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v1/tasks/{name}/{action}", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, r.PathValue("action")+" "+r.Header.Get("Idempotency-Key"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprintln(w, `{"result": "started"}`)
	})
	mux.Handle("/", pageFleet(t, 0))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	sent := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(keys)
	}
	b := startBrowser(t, bin, 1280, 800)
	b.navigate(srv.URL + "/tasks/" + url.PathEscape(xssName))
	b.typeText("#token", "s3cret-token")
	b.eval(`var run = document.querySelector("button[data-action=trigger]");
		run.click(); run.click();`, nil)
	b.await("two requests", `document.getElementById("result").textContent.indexOf("202") >= 0`)
	// The page's clock, 10 s on: a new action.
	b.eval(`var realNow = Date.now; Date.now = function () { return realNow() + 10000; };
		document.getElementById("result").textContent = "";
		document.querySelector("button[data-action=trigger]").click();
		document.querySelector("button[data-action=pause]").click();`, nil)
	b.await("the later requests", `document.getElementById("result").textContent.indexOf("202") >= 0`)
	var got []string
	for range 200 {
		if got = sent(); len(got) >= 4 {
			break
		}
		b.eval(`1`, nil) // a round trip to the browser, while the last requests land
	}
	if len(got) != 4 {
		t.Fatalf("requests %q; want 4", got)
	}
	// The two requests of one step may land in either order.
	later := got[2:]
	slices.Sort(later) // "pause ..." before "trigger ..."
	switch {
	case !strings.HasPrefix(got[0], "trigger page-") || got[0] != got[1]:
		t.Errorf("a double click sent %q and %q; want one key", got[0], got[1])
	case !strings.HasPrefix(later[1], "trigger page-") || later[1] == got[0]:
		t.Errorf("a click 10 s later sent %q; want a new key (the first was %q)", later[1], got[0])
	case later[0] != "pause ":
		t.Errorf("pause sent %q; want no key", later[0])
	}
}
