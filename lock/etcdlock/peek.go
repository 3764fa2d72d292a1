package etcdlock

import (
	"context"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/slotd/slotd/lock"
)

// peekPerTxn keeps a Peek transaction within etcd's default limit of 128
// operations (--max-txn-ops): one read per slot.
const peekPerTxn = 128

// peekInFlight bounds the transactions of one Peek in flight at once.
const peekInFlight = 8

// Peek implements lock.Peeker: the slots' state keys, up to peekPerTxn
// per transaction (peekInFlight at once), and one TimeToLive per distinct
// lease of the running ones whose TTL is asked for (a replica's slots
// share its lease: a burst's reads need a few).
// States reads the attempts key too, and a TTL for every slot.
//
// The reads are linearizable (a Get asks for it, and makes the Txn ask),
// though a stale answer would be safe: a follower that lags could read
// "free" for a slot since claimed or done (the reader claims, and the
// claim reports the truth), or "running", "done" or a backoff for a slot
// since released or rerun — whose notice (releases.go) the reader hears
// anyway, and acts on even after its read. What a serializable read would
// cost is the delay: a lagging "running" is read again only when its
// lease would end. The linearizable read costs the member a ReadIndex,
// shared by the reads in flight, once per deferral per replica: nothing
// per slot worth buying back.
//
// TimeToLive answers in whole seconds, rounded down, from the leader: a
// running slot's TTL here is at most what is left, never more, so its
// reader looks again no later than the lease can end. A lease that has
// run out but is not yet revoked (the leader revokes every half second)
// reads TTL 0: its reader claims, finds it held, and hears its deletion.
func (s *Store) Peek(ctx context.Context, slots []lock.Slot, ttl []bool) ([]lock.State, error) {
	if ttl != nil && len(ttl) != len(slots) {
		return nil, fmt.Errorf("etcdlock: peek at %d slots: %d TTL flags", len(slots), len(ttl))
	}
	out := make([]lock.State, len(slots))
	leaseOf := make([]clientv3.LeaseID, len(slots))
	// The transactions go out together, peekInFlight at a time: a burst's
	// read costs a round trip or two, not one per 128 slots.
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed error
	sem := make(chan struct{}, peekInFlight)
	for from := 0; from < len(slots); from += peekPerTxn {
		chunk := slots[from:min(from+peekPerTxn, len(slots))]
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			ops := make([]clientv3.Op, len(chunk))
			for i, slot := range chunk {
				state, _, _ := s.keys(slot)
				ops[i] = clientv3.OpGet(state)
			}
			resp, err := s.cli.Txn(ctx).Then(ops...).Commit()
			if err != nil {
				mu.Lock()
				failed = err
				mu.Unlock()
				return
			}
			for i := range chunk {
				st := lock.State{Status: "free"}
				if kv := one(resp.Responses[i]); kv != nil {
					st, _ = parseState(string(kv.Value)) // a foreign value reads "foreign": its claim says so
					if st.Status == "running" {
						leaseOf[from+i] = clientv3.LeaseID(kv.Lease)
					}
				}
				out[from+i] = lock.State{Status: st.Status}
			}
		}()
	}
	wg.Wait()
	if failed != nil {
		return nil, etcdErr(fmt.Errorf("etcdlock: peek at %d slots: %w", len(slots), failed))
	}
	ttls := map[clientv3.LeaseID]time.Duration{}
	for i, id := range leaseOf {
		if out[i].Status == "running" && (ttl == nil || ttl[i]) {
			ttls[id] = 0
		}
	}
	for id := range ttls {
		ttls[id] = s.leaseTTL(ctx, id)
	}
	if err := ctx.Err(); err != nil {
		return nil, etcdErr(fmt.Errorf("etcdlock: lease left of %d slots: %w", len(ttls), err))
	}
	for i, id := range leaseOf {
		if out[i].Status == "running" && (ttl == nil || ttl[i]) {
			out[i].TTL = ttls[id]
		}
	}
	return out, nil
}
