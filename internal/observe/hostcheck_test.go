package observe

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// Issue 26 item 14: any web page could read a loopback daemon's API by
// DNS rebinding (its name re-pointed at 127.0.0.1), since the server
// answered whatever Host the browser sent. Now only a Host that cannot be
// rebound (an IP literal, localhost), the listen host, or a name in
// [http] allowed_hosts is answered; any other is 421 before a handler
// runs.
func TestCheckHostRefusesRebinding(t *testing.T) {
	served := 0
	h := CheckHost(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served++
		io.WriteString(w, "ok")
	}), "slotd-0.internal:9464", []string{"slotd.example.com", "*.svc.cluster.local"})
	srv := httptest.NewServer(h)
	defer srv.Close()

	for _, tc := range []struct {
		host string
		ok   bool
	}{
		{"127.0.0.1:9464", true},
		{"127.0.0.1", true},
		{"[::1]:9464", true},
		{"10.1.2.3:9464", true},
		{"localhost:9464", true},
		{"LOCALHOST", true},
		{"app.localhost:9464", true},
		{"slotd-0.internal:9464", true},
		{"slotd.example.com", true},
		{"slotd.example.com.:443", true},
		{"slotd.default.svc.cluster.local:9464", true},
		{"attacker.example:9464", false},
		{"attacker.example", false},
		{"slotd.example.com.attacker.example", false},
		{"svc.cluster.local", false},
		{"127.0.0.1.nip.io:9464", false},
		{"localhost.attacker.example", false},
	} {
		req, err := http.NewRequest("GET", srv.URL+"/api/v1/tasks", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = tc.host
		before := served
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case tc.ok && (resp.StatusCode != 200 || served != before+1):
			t.Errorf("Host %s: %d %q; want it served", tc.host, resp.StatusCode, body)
		case !tc.ok && (resp.StatusCode != http.StatusMisdirectedRequest || served != before || !strings.Contains(string(body), "allowed_hosts")):
			t.Errorf("Host %s: %d %q, handler ran %v; want 421 naming allowed_hosts, the handler not run", tc.host, resp.StatusCode, body, served != before)
		}
	}
}
