package zklock

import "context"

// Open connects to the ensemble as Dial does and returns the store with
// the run history beside its slots (History, entries living o.HistoryTTL):
// one session for both, as slotd's daemon runs on a [zookeeper]
// configuration. Closing the store closes the session the history uses.
func Open(ctx context.Context, o Options) (*Store, *History, error) {
	s, err := Dial(ctx, o)
	if err != nil {
		return nil, nil, err
	}
	return s, NewHistory(s, o.HistoryTTL), nil
}
