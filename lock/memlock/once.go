package memlock

import (
	"context"
	"fmt"
	"time"

	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/internal/schema"
)

// Once implements Oncer.
func (m *Store) Once(ctx context.Context, slot lock.Slot, event, value string, ttl time.Duration) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("lock: once %s %s: %w", slot, event, err)
	}
	if ttl <= 0 {
		return false, fmt.Errorf("lock: once %s %s: TTL %v must be positive", slot, event, ttl)
	}
	key := schema.OnceKey("slotd", slot, event)
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if _, ok := m.get(key, now); ok {
		return false, nil
	}
	m.set(key, value, ttl, now)
	return true, nil
}
