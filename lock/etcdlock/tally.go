package etcdlock

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/slotd/slotd/lock"
)

var _ lock.Peeker = (*Store)(nil)

// talliesPerRead bounds the tallies one read of a fire time takes: one
// per live replica, so far more than a fleet has.
const talliesPerRead = 1024

// tallyPrefix is the keys' prefix of the tallies of the slots due at at:
// "<prefix>:tally:<unix ms>:", then the replica id.
func (s *Store) tallyPrefix(at time.Time) string {
	return s.prefix + ":tally:" + strconv.FormatInt(at.UnixMilli(), 10) + ":"
}

// Tally implements lock.Peeker: one Put, on the expiry bucket's lease
// of ttl (kept at least ttl, and a little longer).
func (s *Store) Tally(ctx context.Context, at time.Time, replica string, sum uint64, ttl time.Duration) error {
	key := s.tallyPrefix(at) + replica
	err := s.withBucket(ctx, ttl, func(id clientv3.LeaseID) error {
		octx, cancel := opContext(ctx)
		defer cancel()
		_, err := s.cli.Put(octx, key, strconv.FormatUint(sum, 10), clientv3.WithLease(id))
		return err
	})
	if err != nil {
		return etcdErr(fmt.Errorf("etcdlock: tally %s: %w", key, err))
	}
	return nil
}

// Tallies implements lock.Peeker: one range read of the fire time's
// tallies, bounded by talliesPerRead.
func (s *Store) Tallies(ctx context.Context, at time.Time, replicas []string) ([]uint64, error) {
	if len(replicas) == 0 {
		return nil, nil
	}
	prefix := s.tallyPrefix(at)
	octx, cancel := opContext(ctx)
	defer cancel()
	resp, err := s.cli.Get(octx, prefix, clientv3.WithPrefix(), clientv3.WithLimit(talliesPerRead))
	if err != nil {
		return nil, etcdErr(fmt.Errorf("etcdlock: read tallies %s*: %w", prefix, err))
	}
	got := make(map[string]string, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		got[strings.TrimPrefix(string(kv.Key), prefix)] = string(kv.Value)
	}
	sums := make([]uint64, len(replicas))
	for i, id := range replicas {
		v, ok := got[id]
		if !ok {
			continue
		}
		sum, err := strconv.ParseUint(v, 10, 64)
		if err != nil || len(v) > 20 {
			return nil, fmt.Errorf("etcdlock: tally %s%s holds %.40q, not a sum", prefix, id, v)
		}
		sums[i] = sum
	}
	return sums, nil
}
