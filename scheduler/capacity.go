package scheduler

// A replica's capacity ([daemon] max_running). A burst of due slots would
// otherwise have the winners start every one of them at once. With a
// capacity, a run about to claim while the replica's attempts, plus its
// claims queued or in flight (each may win), reach it claims nothing: it
// waits, capped, for an attempt to end. Its peers then take the slot: a
// replica at capacity never claims, so one that was the slot's preferred
// claimant only costs the peers their deferral (preferWait, up to
// deferLimit), after which they claim as they do for a claimant that died.
// The capped run still watches the slot: told that a peer took it, it
// waits as for a held slot; told it is done, it settles; when a running
// attempt ends, the runs capped longest claim first. A run still capped
// when its window closes counts its slot missed, for capacity: no replica
// started it (one that had would have been heard of).
//
// The capacity is this replica's: peers do not learn of it. Claims and
// attempts of on_failure hooks are not counted; a hook runs beside.

// WithMaxRunning caps the attempts this replica runs at once, at n > 0
// (default 0: no cap). See capacity.go.
func WithMaxRunning(n int) Option { return func(s *Scheduler) { s.maxRunning = max(n, 0) } }

// atCapacity reports whether a new claim would exceed the capacity: the
// attempts running, the claims in flight and those queued this turn
// reach it.
func (l *loop) atCapacity() bool {
	m := l.s.maxRunning
	return m > 0 && l.running+l.pending+len(l.claims) >= m
}

// capRun parks r until the replica has room for its claim, or its window
// closes.
func (l *loop) capRun(r *run) {
	r.state = capped
	l.s.stats.Capacity.Waiting.Add(1)
	l.schedule(r, r.slot.Deadline.Sub(l.s.now()))
	if r.listed { // capped before, and still in the list: keeps its place
		return
	}
	// A replica full for long must not keep the runs that left the list
	// meanwhile (taken by a peer, settled, ended) alive in it.
	l.capped = appendCompacted(l.capped, r, func(x *run) bool {
		x.listed = x.state == capped
		return x.listed
	})
	r.listed = true
}

// uncap takes r out of the capped state, as a notice or its wake moves it
// on; its entry in l.capped is dropped by admit.
func (l *loop) uncap(r *run) {
	if r.state == capped {
		l.s.stats.Capacity.Waiting.Add(-1)
		r.state = waiting
	}
}

// admit lets the runs capped longest claim, as far as the capacity allows.
func (l *loop) admit() {
	i := 0
	for ; i < len(l.capped) && !l.atCapacity(); i++ {
		r := l.capped[i]
		l.capped[i] = nil
		r.listed = false
		if r.state != capped || r.lagged {
			continue // a lagged run's window has closed: it claims nothing
		}
		l.uncap(r)
		l.unschedule(r)
		l.advance(r, false)
	}
	l.capped = l.capped[i:] // not copied down: the next sweep or growth drops the front
}

// attemptStarted and attemptEnded keep the count of running attempts.
func (l *loop) attemptStarted() {
	l.running++
	l.s.stats.Capacity.Running.Store(int64(l.running))
}

func (l *loop) attemptEnded() {
	l.running--
	l.s.stats.Capacity.Running.Store(int64(l.running))
}
