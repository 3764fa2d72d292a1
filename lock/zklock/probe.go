package zklock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/slotd/slotd/lock"
)

var _ lock.Prober = (*Store)(nil)

// probePath is the node Probe writes for replica: under the root, beside
// the clock node, a name no task's node can have.
func (s *Store) probePath(replica string) string { return s.root + "/.probe-" + escape(replica) }

// Probe implements lock.Prober: it writes replica's probe node, a TTL
// node of ttl (created on the first probe, set after), as a claim writes:
// the leader must commit it through the quorum, under the store's ACL. A
// refusal (NOAUTH, a read-only member) is a *lock.StoreError.
func (s *Store) Probe(ctx context.Context, replica string, ttl time.Duration) error {
	path := s.probePath(replica)
	for try := 0; ; try++ {
		_, err := call(ctx, func() (*zk.Stat, error) { return s.conn.Set(path, []byte(replica), -1) })
		if err == nil {
			return nil
		}
		if !errors.Is(err, zk.ErrNoNode) || try > 0 {
			return fmt.Errorf("zklock: probe (write %s): %w", path, err)
		}
		created, err := s.createTTL(ctx, "", path, []byte(replica), max(ttl, time.Second))
		if err != nil {
			return fmt.Errorf("zklock: probe: %w", err)
		}
		if created {
			return nil
		}
	}
}
