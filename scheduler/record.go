package scheduler

import (
	"context"
	"log/slog"
	"time"

	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/scheduler/history"
)

// HistoryEntry and History are the run history's (package history) under
// the names the engine's callers use: the entry an attempt records, and
// where it is recorded (WithHistory).
type (
	HistoryEntry = history.Entry
	History      = history.History
)

// completeRecorder is a History that appends a success's entry in the
// same step as the completion that marks its slot done, where its store
// can (redislock.History beside one Redis server or Sentinel: one script,
// one round trip, and an entry exactly when the slot is marked done).
// recorded false: the entry was not appended; record it as before.
type completeRecorder interface {
	CompleteRecorded(ctx context.Context, store lock.Store, slot lock.Slot, owner lock.Owner, doneTTL time.Duration, e HistoryEntry) (recorded bool, err error)
}

// historyTimeout bounds one append: history must never hold a slot up.
const historyTimeout = 2 * time.Second

// record appends one finished attempt to the history, on the attempt's own
// goroutine once the slot is completed or released, so it holds up no
// slot: only this replica's next claim after a failure, by one round trip
// (historyTimeout at most). It runs under that timeout outliving ctx (an
// attempt cut short by shutdown is recorded too). A failed append is
// logged; the slot's outcome does not depend on it. A goroutine per
// append would cost a burst of ten thousand slots as many goroutines, each
// waiting for the round trip its append leaves in.
func (s *Scheduler) record(ctx context.Context, task string, e HistoryEntry, log func() *slog.Logger) {
	if s.hist == nil {
		return
	}
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), historyTimeout)
	defer cancel()
	if err := s.hist.Append(hctx, task, e); err != nil {
		log().Warn("run history not recorded", "err", err, "outcome", e.Outcome)
	}
}
