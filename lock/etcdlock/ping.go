package etcdlock

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/slotd/slotd/lock"
)

var _ lock.Pinger = (*Store)(nil)

// Ping implements lock.Pinger: a linearizable read, which the leader
// answers only after a quorum confirms it still leads.
func (s *Store) Ping(ctx context.Context) error {
	if _, err := s.cli.Get(ctx, s.prefix+":clock", clientv3.WithCountOnly()); err != nil {
		return fmt.Errorf("etcdlock: ping: %w", err)
	}
	return nil
}
