package etcdlock

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
)

// fakeLeases stands for the members behind the client's round robin: the
// test answers each LeaseKeepAlive stream's requests itself, in order, as
// etcd does (one at a time).
type fakeLeases struct {
	pb.LeaseClient
	streams chan *fakeKA // each stream opened, in order
}

func (f *fakeLeases) LeaseKeepAlive(ctx context.Context, _ ...grpc.CallOption) (pb.Lease_LeaseKeepAliveClient, error) {
	s := &fakeKA{ctx: ctx, reqs: make(chan int64, 64), answers: make(chan *pb.LeaseKeepAliveResponse, 64), errs: make(chan error, 1)}
	f.streams <- s
	return s, nil
}

type fakeKA struct {
	grpc.ClientStream
	ctx     context.Context
	reqs    chan int64 // the lease ids sent on it, in order
	answers chan *pb.LeaseKeepAliveResponse
	errs    chan error // breaks it
}

func (s *fakeKA) Send(r *pb.LeaseKeepAliveRequest) error {
	select {
	case s.reqs <- r.ID:
		return nil
	case <-s.ctx.Done():
		return io.EOF
	}
}

func (s *fakeKA) Recv() (*pb.LeaseKeepAliveResponse, error) {
	select {
	case a := <-s.answers:
		return a, nil
	case err := <-s.errs:
		return nil, err
	case <-s.ctx.Done():
		return nil, s.ctx.Err()
	}
}

func (s *fakeKA) Context() context.Context { return s.ctx }

func (s *fakeKA) answer(id, ttl int64) { s.answers <- &pb.LeaseKeepAliveResponse{ID: id, TTL: ttl} }

type kaResult struct {
	id, ttl int64
	err     error
}

func newFakeKA(t *testing.T) (*kaStream, *fakeLeases, chan kaResult, func(id int64, timeout time.Duration)) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	f := &fakeLeases{streams: make(chan *fakeKA, 64)}
	k := &kaStream{ctx: ctx, lc: f, goOwned: func(g func()) { wg.Add(1); go func() { defer wg.Done(); g() }() }}
	results := make(chan kaResult, 64)
	send := func(id int64, timeout time.Duration) {
		k.send(id, timeout, time.Hour, func(ttl int64, err error) { results <- kaResult{id, ttl, err} })
	}
	return k, f, results, send
}

// freshStream awaits the next stream opened; a keepalive that is given up
// meanwhile fails the test.
func freshStream(t *testing.T, f *fakeLeases, results chan kaResult) *fakeKA {
	t.Helper()
	select {
	case s := <-f.streams:
		return s
	case r := <-results:
		t.Fatalf("keepalive of lease %d ended while its member was slow: %+v", r.id, r)
		return nil
	}
}

// A member slow to renew one lease (a follower forwarding it to a leader
// that is being elected, or waiting for its applied index) answers the
// keepalives behind it on the same stream no sooner. The keepalives that
// go unanswered for their timeout go again on a fresh stream and are
// answered there; the slow member's late answers, matched to their
// requests, still count for a keepalive no other stream answered, and the
// retired stream closes once nothing on it is waited for.
func TestSlowStreamHoldsNoKeepaliveUp(t *testing.T) {
	_, f, results, send := newFakeKA(t)
	send(1, 20*time.Millisecond)
	send(2, 20*time.Millisecond)
	slow := <-f.streams
	if a, b := <-slow.reqs, <-slow.reqs; a != 1 || b != 2 {
		t.Fatalf("sent %d, %d on the first stream; want 1, 2", a, b)
	}
	// the slow member answers nothing yet; each keepalive goes again
	// on a fresh stream, which answers them in the order sent
	fresh := freshStream(t, f, results)
	first := <-fresh.reqs
	fresh.answer(first, 5)
	if r := <-results; r.err != nil || r.id != first || r.ttl != 5 {
		t.Fatalf("keepalive of lease %d, answered on the fresh stream: %+v", first, r)
	}
	// the slow member answers both; lease 1's is the first in its
	// order, and counts if lease 1 is still waiting
	slow.answer(1, 7)
	slow.answer(2, 7)
	if r := <-results; r.err != nil || r.id == first || r.ttl != 7 {
		t.Fatalf("keepalive answered late on the slow stream: %+v, want lease %d with TTL 7", r, 3-first)
	}
	<-slow.ctx.Done() // retired, and nothing on it waited for: closed
}

// An answer on a stream is its first unanswered request's, never a later
// keepalive's of the same lease: a keepalive that went again on a fresh
// stream and was answered on the first leaves an answer due on the fresh
// one, which says nothing of the lease's next keepalive sent after it.
func TestEarlierKeepalivesAnswerIsNotALatersAnswer(t *testing.T) {
	_, f, results, send := newFakeKA(t)
	send(1, 20*time.Millisecond)
	first := <-f.streams
	<-first.reqs
	last := freshStream(t, f, results) // sent again on a fresh stream
	<-last.reqs
	first.answer(1, 111)
	if r := <-results; r.err != nil || r.ttl != 111 {
		t.Fatalf("first keepalive: %+v", r)
	}
	for len(f.streams) > 0 { // sent again before it was answered: the last is current
		last = <-f.streams
		<-last.reqs
	}
	send(1, time.Hour)
	if id := <-last.reqs; id != 1 {
		t.Fatalf("sent lease %d", id)
	}
	last.answer(1, 111) // due to the first keepalive's request
	last.answer(1, 222)
	if r := <-results; r.err != nil || r.ttl != 222 {
		t.Fatalf("second keepalive: %+v, want the answer to its own request (TTL 222)", r)
	}
}

// A stream that breaks fails the keepalives that only it carried; the next
// keepalive goes on another.
func TestBrokenStreamFailsItsKeepalives(t *testing.T) {
	_, f, results, send := newFakeKA(t)
	send(1, time.Hour)
	s := <-f.streams
	<-s.reqs
	s.errs <- errNoLeaderHere
	if r := <-results; r.err != errNoLeaderHere {
		t.Fatalf("keepalive on a broken stream: %+v", r)
	}
	send(1, time.Hour)
	next := <-f.streams
	<-next.reqs
	next.answer(1, 5)
	if r := <-results; r.err != nil || r.ttl != 5 {
		t.Fatalf("keepalive after the break: %+v", r)
	}
}

var errNoLeaderHere = errors.New("no leader")
