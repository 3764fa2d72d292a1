package scheduler

// Missed slots. A run whose window closes with no success it knows of
// waits missLag for news on its way (over, in run.go), then asks the
// store (confirmMiss) before it counts and reports the slot missed.

import (
	"context"
	"log/slog"
	"time"

	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/tasks"
)

// missLag is how long after its deadline a run that knows of no success
// and no holder waits for a notice on its way (a peer's claim, sent just
// before the deadline, or its completion) before reporting the slot
// missed.
const missLag = 250 * time.Millisecond

// missed counts and reports r's slot as missed: its window closed
// without a success, with the reason if one is known — this replica was
// at max_running, or a failed attempt's retry backoff outlasted the window.
func (l *loop) missed(r *run) {
	st := l.s.stats.Task(r.t.Name)
	st.Missed.Inc()
	end := slotEnd{kind: tasks.FailureMissed}
	switch {
	case r.state == capped:
		st.MissedCapacity.Inc()
		end.reason = tasks.ReasonCapacity
		r.logger(l.s).Warn("slot window closed without a success: this replica was at max_running and no peer started it",
			"deadline", r.slot.Deadline, "max_running", l.s.maxRunning)
	case r.backoff:
		st.MissedBackoff.Inc()
		end.reason = tasks.ReasonBackoff
		r.logger(l.s).Warn("slot window closed without a success: the retry backoff after its failed attempt ends at or after the deadline",
			"deadline", r.slot.Deadline)
	default:
		r.logger(l.s).Warn("slot window closed without a success", "deadline", r.slot.Deadline)
	}
	l.runFailed(r, end)
}

// confirmMiss queues a read of lagged r's slot: a run that heard of no
// holder and no success by missLag after its deadline is called missed
// only if the store agrees. The news may be later still (the store's
// replies and notices lag under load: a ZooKeeper ensemble behind a burst
// had each replica call thousands of slots missed that a peer had run),
// or lost (notices are hints). The runs lagged in one turn are read
// together, in one Peek (or States) call.
func (l *loop) confirmMiss(r *run) {
	r.asked = true
	l.unschedule(r)
	l.confirms = append(l.confirms, r)
}

// unconfirmedFor is how long after a read of lagged runs' slots failed the
// next lagged runs are counted missed without a read, as before there was
// one.
const unconfirmedFor = 5 * time.Second

// sendConfirms sends the read of the queued lagged runs' slots.
func (l *loop) sendConfirms() {
	if len(l.confirms) == 0 {
		return
	}
	runs := l.confirms
	l.confirms = nil
	slots := make([]lock.Slot, len(runs))
	lease := runs[0].t.Lease
	for i, r := range runs {
		slots[i] = r.slot
		lease = min(lease, r.t.Lease)
	}
	store, pk, inbox := l.s.store, l.peeker, &l.inbox
	l.workers.Add(1)
	go func() {
		defer l.workers.Done()
		cctx, cancel := context.WithTimeout(l.ctx, lease/3)
		defer cancel()
		var states []lock.State
		var err error
		if pk != nil {
			// Done or running is all it needs: no lease is read (on
			// ZooKeeper a done slot is one request, not two).
			states, err = pk.Peek(cctx, slots, make([]bool, len(slots)))
		} else {
			states, err = store.States(cctx, slots)
		}
		inbox.post(event{kind: confirmed, runs: runs, states: states, reply: lock.ClaimReply{Err: err}})
	}()
}

// onConfirmed acts on the read of lagged runs' slots (states in their
// order; nil with err if the store could not answer): a slot done or
// running was not missed — a peer ran it, or runs it and reports for
// itself; any other, or one the store could not read, is missed, as
// before the read. A run that ended meanwhile (a notice came) is left.
func (l *loop) onConfirmed(runs []*run, states []lock.State, err error) {
	if err != nil && states == nil && l.ctx.Err() == nil {
		// A store that cannot answer is not asked again for a while: the
		// reads would only add to what it cannot keep up with (a
		// ZooKeeper ensemble behind a burst ran a fifth fewer slots when
		// every replica read every slot whose claims had timed out).
		l.unconfirmedUntil = l.s.clock.Now().Add(unconfirmedFor)
		r := runs[0]
		r.logger(l.s).Warn("the states of slots past their deadline could not be read: they, and for a while the next ones, are counted missed without asking",
			"slots", len(runs), "for", unconfirmedFor, "err", err)
	}
	for i, r := range runs {
		if r.state == ended {
			continue
		}
		var status string
		if len(states) == len(runs) {
			status = states[i].Status
		}
		switch {
		case l.ctx.Err() != nil:
		case status == "done" || status == "running":
			if l.s.log.Enabled(l.ctx, slog.LevelDebug) {
				r.logger(l.s).Debug("no news of the slot by its deadline, but the store has it "+status+": not missed", "deadline", r.slot.Deadline)
			}
		default:
			l.missed(r)
		}
		l.uncap(r)
		l.end(r)
	}
}
