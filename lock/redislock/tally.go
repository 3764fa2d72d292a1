package redislock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/lock/internal/schema"
)

// Tally implements lock.Peeker: one SET with its TTL.
func (r *Store) Tally(ctx context.Context, at time.Time, replica string, sum uint64, ttl time.Duration) error {
	k := schema.TallyKey(r.prefix, at, replica)
	p := r.rdb.Pipeline()
	p.Set(ctx, k, strconv.FormatUint(sum, 10), ttl)
	if _, err := p.Exec(ctx); err != nil {
		return redisErr(fmt.Errorf("lock: tally %s: %w", k, err))
	}
	return nil
}

// Tallies implements lock.Peeker: one MGET, whose keys share their fire
// time's hash tag (one shard of a Cluster).
func (r *Store) Tallies(ctx context.Context, at time.Time, replicas []string) ([]uint64, error) {
	if len(replicas) == 0 {
		return nil, nil
	}
	keys := make([]string, len(replicas))
	for i, id := range replicas {
		keys[i] = schema.TallyKey(r.prefix, at, id)
	}
	p := r.rdb.Pipeline()
	m := p.MGet(ctx, keys...)
	if _, err := p.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, redisErr(fmt.Errorf("lock: read %d tallies of %s: %w", len(keys), at.UTC().Format(time.RFC3339Nano), err))
	}
	vs := m.Val()
	if len(vs) != len(keys) {
		return nil, fmt.Errorf("lock: read %d tallies of %s: %d answers", len(keys), at.UTC().Format(time.RFC3339Nano), len(vs))
	}
	sums := make([]uint64, len(keys))
	for i, v := range vs {
		s, ok := v.(string)
		if !ok {
			continue // none
		}
		var err error
		if sums[i], err = schema.ParseTally(keys[i], s); err != nil {
			return nil, err
		}
	}
	return sums, nil
}
