package zklock

import (
	"context"

	"github.com/slotd/slotd/lock"
)

var _ lock.Pinger = (*Store)(nil)

// Ping implements lock.Pinger: the write Time makes (a read is served by
// any member, even one cut off from the quorum; a write commits only on a
// quorum). It refreshes the reading of the leader's clock as well.
func (s *Store) Ping(ctx context.Context) error {
	_, err := s.Time(ctx)
	return err
}
