package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// sink is the sustained mode's HTTP endpoint, in this process: the http
// plugin POSTs every slot to it. It serves HTTP/1.1 with keep-alive (no
// TLS, so no HTTP/2), answers 204 to each request, and records each one
// as an attempt — receipt time, task, slot, attempt number, replica from
// the Slotd-* headers — so that the slots it saw, and how often, are its
// ledger. It counts the TCP connections it accepted: with keep-alive
// reuse, far fewer than requests.
type sink struct {
	srv   *http.Server
	ln    net.Listener
	url   string
	conns atomic.Int64 // TCP connections accepted
	bad   atomic.Int64 // requests without the slot headers

	mu   sync.Mutex
	hits []sinkHit // since the last take
	n    int64     // requests recorded
}

// sinkHit is one request, as the records take it.
type sinkHit struct {
	task, replica string
	slot, at      int64 // unix ns
	attempt       int
}

// sinkReport is what the sink saw over the whole run.
type sinkReport struct {
	Requests    int64 `json:"requests"`
	Connections int64 `json:"connections"` // TCP connections accepted
	Malformed   int64 `json:"malformed"`   // requests without parseable Slotd-* headers
}

func startSink() (*sink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &sink{ln: ln, url: "http://" + ln.Addr().String() + "/slot"}
	s.srv = &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateNew {
				s.conns.Add(1)
			}
		},
	}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

func (s *sink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	at := time.Now().UnixNano()
	_, _ = io.Copy(io.Discard, r.Body)
	slot, err := time.Parse(time.RFC3339, r.Header.Get("Slotd-Slot-Time"))
	attempt, err2 := strconv.Atoi(r.Header.Get("Slotd-Attempt"))
	task := r.Header.Get("Slotd-Task")
	if err != nil || err2 != nil || task == "" {
		s.bad.Add(1)
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.hits = append(s.hits, sinkHit{task: task, replica: r.Header.Get("Slotd-Replica"), slot: slot.UnixNano(), at: at, attempt: attempt})
	s.n++
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// take returns the requests recorded since the last take.
func (s *sink) take() []sinkHit {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.hits
	s.hits = nil
	return h
}

// close stops the sink; requests still arriving fail.
func (s *sink) close() sinkReport {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.srv.Shutdown(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	return sinkReport{Requests: s.n, Connections: s.conns.Load(), Malformed: s.bad.Load()}
}
