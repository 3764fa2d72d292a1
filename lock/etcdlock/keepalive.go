package etcdlock

import (
	"context"
	"errors"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// kaStream carries the Store's keepalives: every running lease's, at most
// one in flight per lease, over one LeaseKeepAlive stream at a time (the
// current one). The stream requires a leader, so a member cut off from
// the quorum fails it at once rather than holding it open.
//
// etcd answers a stream's keepalives one at a time, in the order they
// were sent (v3rpc's leaseKeepAlive: receive, renew, answer, and only then
// the next): a member whose renewals are slow — a follower forwards each
// to the leader and retries it for seconds across an election, and a
// leader waits up to a second for its applied index — holds up every
// lease behind the slow one. So a keepalive unanswered for its timeout is
// not given up: its stream is retired (nothing more is sent on it; it
// closes once none of what it carries is waited for) and the keepalive,
// after every other one waiting on that stream, goes again on a fresh
// current stream, which the client's round robin opens on the next
// member. The first answer on any of its streams is its answer; one that
// is still unanswered a whole lease after it was sent can prove nothing
// more and fails. Each answer is matched to its request by its place in
// its stream's order, so an answer to a keepalive sent earlier is never
// taken for a later one's.
type kaStream struct {
	ctx     context.Context
	lc      pb.LeaseClient
	goOwned func(func())

	mu  sync.Mutex
	cur *kaConn // where keepalives go; nil: one is opened for the next
}

// kaConn is one LeaseKeepAlive stream.
type kaConn struct {
	st      pb.Lease_LeaseKeepAliveClient
	cancel  context.CancelFunc
	sent    []*kaReq // the keepalives sent on it and not answered on it, in order
	retired bool     // nothing more goes on it
	closed  bool
}

// kaReq is one keepalive of a lease, sent on one stream or more.
type kaReq struct {
	id       int64
	cb       func(ttl int64, err error)
	timeout  time.Duration
	deadline time.Time   // a lease after the first send: given up then
	conns    []*kaConn   // the streams it was sent on, in order
	timer    *time.Timer // its next resend, or its deadline
	done     bool        // answered or failed: cb called, or about to be
}

var errKeepaliveTimeout = errors.New("etcdlock: keepalive unanswered")

// errKeepaliveOrder: a stream answered a keepalive other than the first
// it was waiting for, which etcd never does.
var errKeepaliveOrder = errors.New("etcdlock: keepalive answered out of order")

func newKAStream(ctx context.Context, cli *clientv3.Client, goOwned func(func())) *kaStream {
	return &kaStream{ctx: ctx, lc: pb.NewLeaseClient(cli.ActiveConnection()), goOwned: goOwned}
}

// send sends one keepalive of lease id and calls cb once with its answer
// (the lease's TTL in seconds, 0 if etcd no longer knows it) or an error:
// every stream it went on broke, or none answered within lifetime. Each
// time it goes timeout unanswered on the stream it was last sent on, it
// is sent again on a fresh one (see kaStream).
func (k *kaStream) send(id int64, timeout, lifetime time.Duration, cb func(ttl int64, err error)) {
	r := &kaReq{id: id, cb: cb, timeout: timeout, deadline: time.Now().Add(lifetime)}
	k.mu.Lock()
	c, err := k.currentLocked()
	if err != nil {
		k.mu.Unlock()
		cb(0, err)
		return
	}
	r.timer = time.AfterFunc(min(timeout, lifetime), func() { k.late(r) })
	err = k.putLocked(c, r)
	k.mu.Unlock()
	if err != nil {
		k.broken(c, err)
	}
}

// currentLocked returns the current stream, opened if there is none.
func (k *kaStream) currentLocked() (*kaConn, error) {
	if k.cur != nil {
		return k.cur, nil
	}
	if err := k.ctx.Err(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(k.ctx))
	st, err := k.lc.LeaseKeepAlive(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	c := &kaConn{st: st, cancel: cancel}
	k.cur = c
	k.goOwned(func() { k.recv(c) })
	return c, nil
}

// putLocked sends r on c.
func (k *kaStream) putLocked(c *kaConn, r *kaReq) error {
	c.sent = append(c.sent, r)
	r.conns = append(r.conns, c)
	return c.st.Send(&pb.LeaseKeepAliveRequest{ID: r.id})
}

// late is r's timer: r has gone its timeout unanswered on the stream it
// was last sent on, or its lifetime on all of them.
func (k *kaStream) late(r *kaReq) {
	k.mu.Lock()
	if r.done {
		k.mu.Unlock()
		return
	}
	now := time.Now()
	if !now.Before(r.deadline) {
		k.doneLocked(r)
		k.mu.Unlock()
		r.cb(0, errKeepaliveTimeout)
		return
	}
	last := r.conns[len(r.conns)-1]
	var move []*kaReq
	if last == k.cur {
		// The current stream is slow: retire it, and send what waits
		// on it again on a fresh one, r last (if it is r's lease whose
		// renewal is slow rather than the member, the others do not
		// wait for it there).
		last.retired, k.cur = true, nil
		for _, q := range last.sent {
			if !q.done && q != r && q.conns[len(q.conns)-1] == last {
				move = append(move, q)
			}
		}
	}
	move = append(move, r)
	r.timer.Reset(min(r.timeout, r.deadline.Sub(now)))
	c, err := k.currentLocked()
	if err != nil { // no stream now: r waits where it is, and tries again later
		k.mu.Unlock()
		return
	}
	for _, q := range move {
		if q.conns[len(q.conns)-1] == c {
			continue
		}
		if err = k.putLocked(c, q); err != nil {
			break
		}
		if q != r {
			q.timer.Reset(min(q.timeout, q.deadline.Sub(now)))
		}
	}
	k.mu.Unlock()
	if err != nil {
		k.broken(c, err)
	}
}

// recv hands each answer of stream c to the keepalive it answers, until
// the stream breaks or is closed.
func (k *kaStream) recv(c *kaConn) {
	for {
		resp, err := c.st.Recv()
		if err != nil {
			k.broken(c, err)
			return
		}
		k.mu.Lock()
		if len(c.sent) == 0 || c.sent[0].id != resp.ID {
			k.mu.Unlock()
			k.broken(c, errKeepaliveOrder)
			return
		}
		r := c.sent[0]
		c.sent[0] = nil
		c.sent = c.sent[1:]
		answered := !r.done
		if answered {
			k.doneLocked(r)
		} else {
			k.closeIfIdleLocked(c)
		}
		k.mu.Unlock()
		if answered {
			r.cb(resp.TTL, nil)
		}
	}
}

// doneLocked marks r answered or failed, and closes the retired streams
// that no longer carry anything waited for.
func (k *kaStream) doneLocked(r *kaReq) {
	r.done = true
	r.timer.Stop()
	for _, c := range r.conns {
		k.closeIfIdleLocked(c)
	}
}

func (k *kaStream) closeIfIdleLocked(c *kaConn) {
	if !c.retired || c.closed {
		return
	}
	for _, q := range c.sent {
		if !q.done {
			return
		}
	}
	c.closed = true
	c.cancel()
}

// broken closes stream c and fails, with err, each keepalive on it that
// no other open stream carries.
func (k *kaStream) broken(c *kaConn, err error) {
	k.mu.Lock()
	if c.closed {
		k.mu.Unlock()
		return
	}
	c.closed = true
	c.cancel()
	if k.cur == c {
		k.cur = nil
	}
	var failed []*kaReq
	for _, r := range c.sent {
		if r.done || carried(r) {
			continue
		}
		k.doneLocked(r)
		failed = append(failed, r)
	}
	c.sent = nil
	k.mu.Unlock()
	for _, r := range failed {
		r.cb(0, err)
	}
}

// carried reports whether an open stream carries r.
func carried(r *kaReq) bool {
	for _, c := range r.conns {
		if !c.closed {
			return true
		}
	}
	return false
}
