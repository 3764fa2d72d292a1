package etcdlock

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/slotd/slotd/internal/coalesce"
)

// txnReq is one slot operation's transaction: compares, then, else; key
// is the state key it writes.
type txnReq struct {
	key  string
	cmps []clientv3.Cmp
	then []clientv3.Op
	els  []clientv3.Op
}

type txnCall = coalesce.Call[txnReq, *clientv3.TxnResponse]

// Renewals, completions and releases made concurrently share transactions
// (internal/coalesce): a lone one leaves at once as a transaction of its
// own; those that arrive while txnFlights are in flight leave together,
// each a nested transaction (its compares decide for it alone), up to
// claimsPerTxn per transaction — the renewals of ten thousand slots on one
// watchdog grid cost a hundred transactions, not ten thousand.
const txnFlights = 8

func newTxns(s *Store) *coalesce.Coalescer[txnReq, *clientv3.TxnResponse] {
	return coalesce.New(coalesce.Config[txnReq, *clientv3.TxnResponse]{
		Send: s.sendTxns, MaxBatch: claimsPerTxn, MaxFlights: txnFlights,
	})
}

// newWrites batches the run history's entries (History) one transaction
// at a time: the entries appended while one is in flight leave together
// in the next. The attempts of a burst end over its whole length, not at
// once, so with the slot operations' eight flights nearly every entry
// left alone — a Raft entry, and in etcd 3.4 a copy of the members'
// unwritten buffer, per slot. An entry waits for a round trip at most;
// no caller waits on it but the attempt's record.
func newWrites(s *Store) *coalesce.Coalescer[txnReq, *clientv3.TxnResponse] {
	return coalesce.New(coalesce.Config[txnReq, *clientv3.TxnResponse]{
		Send: s.sendTxns, MaxBatch: claimsPerTxn, MaxFlights: 1,
	})
}

// txn runs one slot operation's transaction, batched with others in
// flight.
func (s *Store) txn(ctx context.Context, r txnReq) (*clientv3.TxnResponse, error) {
	return s.txns.Do(ctx, r)
}

// sendTxns sends batch: one transaction alone as itself, more as nested
// transactions of one. Two operations on one key never share a
// transaction (etcd refuses a transaction that writes a key twice): the
// later goes in the next.
func (s *Store) sendTxns(ctx context.Context, batch []*txnCall) {
	ctx, cancel := opContext(ctx)
	defer cancel()
	for len(batch) > 0 {
		seen := map[string]bool{}
		var now, later []*txnCall
		for _, c := range batch {
			if seen[c.Req.key] {
				later = append(later, c)
				continue
			}
			seen[c.Req.key] = true
			now = append(now, c)
		}
		if len(now) == 1 {
			r := now[0].Req
			now[0].Resp, now[0].Err = s.cli.Txn(ctx).If(r.cmps...).Then(r.then...).Else(r.els...).Commit()
		} else {
			ops := make([]clientv3.Op, len(now))
			for i, c := range now {
				ops[i] = clientv3.OpTxn(c.Req.cmps, c.Req.then, c.Req.els)
			}
			resp, err := s.cli.Txn(ctx).Then(ops...).Commit()
			for i, c := range now {
				if err != nil {
					c.Err = err
					continue
				}
				r := (*clientv3.TxnResponse)(resp.Responses[i].GetResponseTxn())
				if r.Header == nil {
					r.Header = resp.Header
				}
				c.Resp = r
			}
		}
		batch = later
	}
}

// opTimeout bounds one try of a transaction. A request that a member
// holds while the cluster elects a leader may otherwise wait out its
// caller's whole deadline (a lease's validity), leaving no time to try
// again on a member that has a leader.
const opTimeout = 2 * time.Second

// opContext is ctx for one try of a transaction: bounded by opTimeout, and
// refused at once by a member without a leader (so the caller's retry
// goes to one that has one).
func opContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(clientv3.WithRequireLeader(ctx), opTimeout)
}
