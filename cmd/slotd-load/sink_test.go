package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The sink records each request's slot from the Slotd-* headers, refuses
// a request without them, and counts connections: requests on one
// keep-alive client arrive over one.
func TestSinkRecordsSlotsAndConnections(t *testing.T) {
	s, err := startSink()
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{}}
	slot := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	post := func(headers map[string]string) int {
		req, err := http.NewRequest(http.MethodPost, s.url, strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	good := map[string]string{"Slotd-Task": "tick-00001", "Slotd-Slot-Time": slot.Format(time.RFC3339),
		"Slotd-Attempt": "2", "Slotd-Replica": "r3"}
	for range 3 {
		if code := post(good); code != http.StatusNoContent {
			t.Fatalf("status %d, want 204", code)
		}
	}
	if code := post(map[string]string{"Slotd-Task": "tick-00001"}); code != http.StatusBadRequest {
		t.Fatalf("request without a slot time: status %d, want 400", code)
	}
	hits := s.take()
	if len(hits) != 3 {
		t.Fatalf("%d requests recorded, want 3", len(hits))
	}
	if h := hits[0]; h.task != "tick-00001" || h.slot != slot.UnixNano() || h.attempt != 2 || h.replica != "r3" || h.at <= 0 {
		t.Errorf("recorded %+v", h)
	}
	if again := s.take(); len(again) != 0 {
		t.Errorf("take returned %d requests already taken", len(again))
	}
	client.CloseIdleConnections()
	if r := s.close(); r.Requests != 3 || r.Malformed != 1 || r.Connections != 1 {
		t.Errorf("report %+v: want 3 requests, 1 malformed, over 1 connection", r)
	}
}

// The sink's requests become the records' attempts, and the window counts
// each of its slots once, however often it ran.
func TestRecordsTakeTheSinksRequests(t *testing.T) {
	s, err := startSink()
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	w0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	recs := newRecords(nil)
	recs.sink = s
	recs.window = [2]int64{w0.UnixNano(), w0.Add(2 * time.Second).UnixNano()}
	s.hits = []sinkHit{
		{task: "tick-00000", slot: w0.UnixNano(), at: w0.Add(time.Millisecond).UnixNano(), attempt: 1, replica: "r1"},
		{task: "tick-00000", slot: w0.UnixNano(), at: w0.Add(2 * time.Millisecond).UnixNano(), attempt: 2, replica: "r2"},
		{task: "tick-00000", slot: w0.Add(-time.Second).UnixNano(), at: w0.UnixNano(), attempt: 1, replica: "r1"},
	}
	if err := recs.poll(); err != nil {
		t.Fatal(err)
	}
	if recs.inWindow != 1 {
		t.Errorf("%d slots counted in the window, want 1", recs.inWindow)
	}
	runs := recs.get("tick-00000", w0)
	if runs == nil || len(runs.attempts) != 2 || !runs.attempts[0].ok {
		t.Fatalf("runs of the window's slot: %+v", runs)
	}
	if v := slotViolations("tick-00000", runs); len(v) == 0 {
		t.Error("two successes of one slot passed the checks")
	}
}
