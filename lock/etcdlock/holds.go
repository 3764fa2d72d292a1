package etcdlock

import (
	"context"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// holds are the slots this Store's owners hold, with the send time of the
// last claim or renewal it confirmed. Its janitor deletes (compared on the
// value) the state key of a hold that has gone a whole lease without a
// confirmed renewal: the holder's watchdog has cancelled the task by then,
// and the replica's lease, which its other slots keep alive, must not keep
// this one held. On Redis the key would have expired at that moment.
type holds struct {
	s *Store

	mu      sync.Mutex
	m       map[string]*hold // by state key
	started bool
}

type hold struct {
	value string
	id    clientv3.LeaseID // the running lease the key is on
	done  clientv3.LeaseID // the bucket lease the claim put the attempts counter on (0: unknown)
	lease time.Duration
	last  time.Time
}

// janitorEvery is how often the janitor looks for overdue holds.
const janitorEvery = 250 * time.Millisecond

func newHolds(s *Store) *holds { return &holds{s: s, m: map[string]*hold{}} }

func (h *holds) add(state, value string, id, done clientv3.LeaseID, lease time.Duration, sent time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.m[state] = &hold{value: value, id: id, done: done, lease: lease, last: sent}
	if !h.started {
		h.started = true
		h.s.goOwned(h.janitor)
	}
}

func (h *holds) touch(state string, sent time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if x := h.m[state]; x != nil && sent.After(x.last) {
		x.last = sent
	}
}

// lease is the running lease of the hold of state by value, if this Store
// has it.
func (h *holds) lease(state, value string) (clientv3.LeaseID, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if x := h.m[state]; x != nil && x.value == value {
		return x.id, true
	}
	return 0, false
}

// done is the bucket lease the claim of the hold of state by value put
// the attempts counter on (0: none known).
func (h *holds) done(state, value string) clientv3.LeaseID {
	h.mu.Lock()
	defer h.mu.Unlock()
	if x := h.m[state]; x != nil && x.value == value {
		return x.done
	}
	return 0
}

func (h *holds) remove(state string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.m, state)
}

func (h *holds) janitor() {
	t := time.NewTicker(janitorEvery)
	defer t.Stop()
	for {
		select {
		case <-h.s.ctx.Done():
			return
		case <-t.C:
		}
		h.mu.Lock()
		var overdue []string
		var values []string
		for k, x := range h.m {
			if time.Since(x.last) >= x.lease {
				overdue, values = append(overdue, k), append(values, x.value)
			}
		}
		h.mu.Unlock()
		for i, k := range overdue {
			// The deletion puts the slot's release notice, as a release
			// does: the peers that left it to this replica claim it at once.
			ctx, cancel := context.WithTimeout(h.s.ctx, time.Second)
			err := h.s.withBucket(ctx, noticeTTL, func(notice clientv3.LeaseID) error {
				_, err := h.s.cli.Txn(ctx).If(clientv3.Compare(clientv3.Value(k), "=", values[i])).
					Then(clientv3.OpDelete(k), h.s.noticeOp(k, notice)).Commit()
				return err
			})
			cancel()
			if err == nil { // else: the next look tries again
				h.mu.Lock()
				if x := h.m[k]; x != nil && x.value == values[i] && time.Since(x.last) >= x.lease {
					delete(h.m, k)
				}
				h.mu.Unlock()
			}
		}
	}
}
