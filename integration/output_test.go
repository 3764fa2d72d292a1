package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// Issue 19 item 5. An exec task prints 100 MB of random bytes and then
// hostile markup and escapes: its attempt's history entry keeps the last
// 4 KiB (output_tail's default) as valid UTF-8, `slotd history` shows it
// with escapes made visible, and the status JSON and page escape its
// markup.
func TestHostileOutputInHistory(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	const hostile = `<script>alert("pwned")</script>`
	c.start(1, "1s", `lease = "2s"
timeout = "1m"
catchup = "none"`,
		c.execTask("noisy", "@every 3s", `rec start
head -c 100000000 /dev/urandom
printf '\n\033[2J\033[31m<script>alert("pwned")</script>\r\nthe end\n'
rec end`, ""))
	c.ledger.await("a noisy slot to end", 60*time.Second, func(evs []event) bool { return slotsWith(evs, "end", 1) >= 1 })

	path := filepath.Join(t.TempDir(), "cli.toml")
	if err := os.WriteFile(path, []byte(config("cli", c.srv.URL(), "1s", "", c.execTask("noisy", "@every 3s", "true", ""))), 0o644); err != nil {
		t.Fatal(err)
	}
	var hist struct {
		Entries []struct {
			Outcome, Output string
		} `json:"entries"`
	}
	awaitPoll(t, "the attempt in the history", 10*time.Second, func() int {
		r := slotd(t, "history", "-config", path, "-json", "noisy")
		if r.code != 0 {
			t.Fatalf("slotd history -json: %+v", r)
		}
		hist.Entries = nil
		if err := json.Unmarshal([]byte(r.stdout), &hist); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(r.stdout, "<script>") {
			t.Errorf("history -json holds raw markup")
		}
		return len(hist.Entries)
	}, func(n int) bool { return n > 0 }, func(n int) string { return "none" })
	e := hist.Entries[0]
	if e.Outcome != "success" || len(e.Output) > 4096 || len(e.Output) < 3000 || !utf8.ValidString(e.Output) ||
		!strings.HasPrefix(e.Output, "…") || !strings.HasSuffix(e.Output, "\x1b[2J\x1b[31m"+hostile+"\r\nthe end\n") {
		t.Errorf("entry %s with %d bytes of output ending %q", e.Outcome, len(e.Output), e.Output[max(len(e.Output)-60, 0):])
	}

	r := slotd(t, "history", "-config", path, "-output", "noisy")
	if r.code != 0 || !strings.Contains(r.stdout, `\u001b[2J\u001b[31m`+hostile+`\r`+"\nthe end\n") || strings.ContainsRune(r.stdout, '\x1b') {
		t.Errorf("slotd history -output does not show the output with its escapes visible:\n%s", tail(r.stdout, 5))
	}

	addr := c.reps[0].httpAddr(10 * time.Second)
	code, body, err := httpGet(addr, "/api/v1/tasks")
	if err != nil || code != 200 || !strings.Contains(body, `\u003cscript\u003ealert(\"pwned\")\u003c/script\u003e`) || strings.Contains(body, "<script>") {
		t.Errorf("/api/v1/tasks: %d %v, markup escaped: %v", code, err, !strings.Contains(body, "<script>"))
	}
	// Attempts, with their output, are on the task's page; its one script
	// is the page's own (the actions), never the task's.
	code, page, err := httpGet(addr, "/tasks/noisy")
	if err != nil || code != 200 || !strings.Contains(page, `&lt;script&gt;alert(&#34;pwned&#34;)&lt;/script&gt;`) || strings.Contains(page, "<script>alert") {
		t.Errorf("/tasks/noisy: %d %v, output escaped on the page: %v", code, err, !strings.Contains(page, "<script>alert"))
	}
}
