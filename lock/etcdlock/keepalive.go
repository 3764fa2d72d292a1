package etcdlock

import (
	"context"
	"errors"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// kaStream is the Store's one keepalive stream: every running lease's
// keepalives go over it, at most one in flight per lease, matched to their
// answers by lease id. It is opened on the first keepalive and again after
// it breaks; it requires a leader, so a member cut off from the quorum
// fails it at once rather than holding it open.
type kaStream struct {
	ctx     context.Context
	lc      pb.LeaseClient
	goOwned func(func())

	mu      sync.Mutex
	st      pb.Lease_LeaseKeepAliveClient
	cancel  context.CancelFunc
	gen     int // which stream st is; a broken stream's reader names its own
	pending map[int64]*kaPending
}

type kaPending struct {
	cb    func(ttl int64, err error)
	timer *time.Timer
}

var errKeepaliveTimeout = errors.New("etcdlock: keepalive unanswered")

func newKAStream(ctx context.Context, cli *clientv3.Client, goOwned func(func())) *kaStream {
	return &kaStream{ctx: ctx, lc: pb.NewLeaseClient(cli.ActiveConnection()), goOwned: goOwned, pending: map[int64]*kaPending{}}
}

// send sends one keepalive of lease id and calls cb once with its answer
// (the lease's TTL in seconds, 0 if etcd no longer knows it) or an error:
// the stream broke, or no answer came within timeout (the stream is then
// reopened).
func (k *kaStream) send(id int64, timeout time.Duration, cb func(ttl int64, err error)) {
	k.mu.Lock()
	if k.st == nil {
		if err := k.openLocked(); err != nil {
			k.mu.Unlock()
			cb(0, err)
			return
		}
	}
	gen := k.gen
	k.pending[id] = &kaPending{cb: cb, timer: time.AfterFunc(timeout, func() { k.broken(gen, errKeepaliveTimeout) })}
	err := k.st.Send(&pb.LeaseKeepAliveRequest{ID: id})
	k.mu.Unlock()
	if err != nil {
		k.broken(gen, err)
	}
}

func (k *kaStream) openLocked() error {
	if err := k.ctx.Err(); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(k.ctx))
	st, err := k.lc.LeaseKeepAlive(ctx)
	if err != nil {
		cancel()
		return err
	}
	k.gen++
	k.st, k.cancel = st, cancel
	gen := k.gen
	k.goOwned(func() { k.recv(st, gen) })
	return nil
}

// recv hands each answer of stream gen to its keepalive, until the stream
// breaks.
func (k *kaStream) recv(st pb.Lease_LeaseKeepAliveClient, gen int) {
	for {
		resp, err := st.Recv()
		if err != nil {
			k.broken(gen, err)
			return
		}
		k.mu.Lock()
		p := k.pending[resp.ID]
		delete(k.pending, resp.ID)
		k.mu.Unlock()
		if p != nil {
			p.timer.Stop()
			p.cb(resp.TTL, nil)
		}
	}
}

// broken closes stream gen, if it is still the current one, and fails
// every keepalive in flight on it with err.
func (k *kaStream) broken(gen int, err error) {
	k.mu.Lock()
	if gen != k.gen || k.st == nil {
		k.mu.Unlock()
		return
	}
	k.cancel()
	k.st = nil
	ps := k.pending
	k.pending = map[int64]*kaPending{}
	k.mu.Unlock()
	for _, p := range ps {
		p.timer.Stop()
		p.cb(0, err)
	}
}
