package memlock

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/slotd/slotd/lock/internal/schema"
)

// Tally implements lock.Peeker, as the Redis store does: a key with a TTL.
func (m *Store) Tally(ctx context.Context, at time.Time, replica string, sum uint64, ttl time.Duration) error {
	k := schema.TallyKey("slotd", at, replica)
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("lock: tally %s: %w", k, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.set(k, strconv.FormatUint(sum, 10), ttl, m.now())
	return nil
}

// Tallies implements lock.Peeker.
func (m *Store) Tallies(ctx context.Context, at time.Time, replicas []string) ([]uint64, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("lock: read tallies: %w", err)
	}
	sums := make([]uint64, len(replicas))
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	for i, id := range replicas {
		k := schema.TallyKey("slotd", at, id)
		e, ok := m.get(k, now)
		if !ok {
			continue
		}
		sum, err := schema.ParseTally(k, e.value)
		if err != nil {
			return nil, err
		}
		sums[i] = sum
	}
	return sums, nil
}
