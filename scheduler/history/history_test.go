package history_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/slotd/slotd/scheduler/history"
)

func entry(slot string, attempt int, outcome, errText string) history.Entry {
	at := time.Date(2024, 1, 15, 14, 0, 0, 0, time.UTC)
	return history.Entry{
		Slot: slot, SlotTime: at, Attempt: attempt, Token: at.Unix()*1000 + int64(attempt),
		Replica: "r1", Outcome: history.Outcome(outcome),
		Started:  at.Add(time.Duration(attempt)*time.Second + 123456789*time.Nanosecond),
		Duration: 1500 * time.Millisecond, Error: errText,
	}
}

// JSON has snake_case keys and the duration in milliseconds, and reads
// back.
func TestHistoryEntryJSON(t *testing.T) {
	e := entry("2024011514", 2, "failure", "boom")
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"id", "slot", "slot_time", "attempt", "token", "replica", "outcome", "started", "duration_ms", "error"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON %s lacks %q", b, k)
		}
	}
	if m["duration_ms"] != 1500.0 {
		t.Errorf("duration_ms = %v, want 1500", m["duration_ms"])
	}
	var back history.Entry
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Duration != e.Duration || back.Token != e.Token || !back.Started.Equal(e.Started) {
		t.Errorf("round trip: got %+v, want %+v", back, e)
	}
}
