package scheduler

import (
	"time"

	"github.com/slotd/slotd/retry"
)

// WithHandoff sets the pause before a replica claims again a slot it has
// just released after a failure (also the jitter after a lease it saw runs
// out). Tests make it longer than they run, so that only a peer woken by
// the release can explain a prompt second attempt.
func WithHandoff(d time.Duration) Option {
	return func(s *Scheduler) { s.handoff = retry.Backoff{Min: d, Max: d} }
}

// LiveView is the fleet's live replica ids as this replica last read them
// (sorted), nil if it has none.
func (s *Scheduler) LiveView() []string {
	if p := s.live.Load(); p != nil {
		ids := make([]string, len(*p))
		for i, x := range *p {
			ids[i] = x.id
		}
		return ids
	}
	return nil
}
