package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/scheduler"
)

// history shows each attempt's output: its last line in the table, all of
// it with -output and in -json. Output is the task's: escape sequences in
// it reach the terminal escaped, newlines intact.
func TestHistoryCommandOutput(t *testing.T) {
	s := newShared(t)
	slot := s.latest("report")
	hostile := "starting\n\x1b[2J\x1b[31mwiped\x1b[0m\r\n<script>alert(1)</script>\nlast words\n"
	for i, out := range []string{hostile, ""} {
		err := s.hist.Append(context.Background(), "report", scheduler.HistoryEntry{
			Slot: slot.ID, SlotTime: slot.Time, Attempt: i + 1, Token: lock.Token(slot.Time, i+1),
			Replica: "r1", Outcome: "failure", Started: s.now, Duration: time.Second, Error: "exit status 1", Output: out,
		})
		if err != nil {
			t.Fatal(err)
		}
	}

	r := runCLI(t, "history", "-config", s.path, "report")
	if r.code != 0 {
		t.Fatalf("history: %v", r)
	}
	if !strings.Contains(r.stdout, "OUTPUT") || lineWith(r.stdout, "last words") == "" || strings.Contains(r.stdout, "wiped") {
		t.Errorf("history does not show the output's last line alone:\n%s", r.stdout)
	}

	r = runCLI(t, "history", "-config", s.path, "-output", "report")
	if r.code != 0 {
		t.Fatalf("history -output: %v", r)
	}
	want := "starting\n\\u001b[2J\\u001b[31mwiped\\u001b[0m\\r\n<script>alert(1)</script>\nlast words\n"
	if !strings.Contains(r.stdout, "--- output of slot "+slot.ID+" attempt 1 (r1, failure") || !strings.Contains(r.stdout, want) {
		t.Errorf("history -output:\n%s", r.stdout)
	}
	if strings.ContainsRune(r.stdout, '\x1b') || strings.ContainsRune(r.stdout, '\r') {
		t.Errorf("history -output wrote a raw control character:\n%q", r.stdout)
	}
	if strings.Contains(r.stdout, "attempt 2 (") {
		t.Errorf("history -output wrote a block for an attempt without output:\n%s", r.stdout)
	}

	r = runCLI(t, "history", "-config", s.path, "-json", "report")
	var got struct {
		Entries []scheduler.HistoryEntry `json:"entries"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Entries) != 2 || got.Entries[1].Output != hostile || got.Entries[0].Output != "" {
		t.Errorf("history -json: %s", r.stdout)
	}
	if strings.Contains(r.stdout, "<script>") {
		t.Errorf("history -json does not escape HTML in the output: %s", r.stdout)
	}
}

// A backfilled attempt is marked so in slotd history's table.
func TestHistoryMarksBackfilled(t *testing.T) {
	var b strings.Builder
	entries := []scheduler.HistoryEntry{
		{Slot: "2024011514", Attempt: 1, Outcome: "success", Backfilled: true},
		{Slot: "2024011515", Attempt: 1, Outcome: "success"},
	}
	if err := writeHistory(&b, "hourly", entries, false); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "2024011514 (backfilled)") || strings.Contains(b.String(), "2024011515 (backfilled)") {
		t.Errorf("history table:\n%s\nwant slot 2024011514 alone marked backfilled", b.String())
	}
}
