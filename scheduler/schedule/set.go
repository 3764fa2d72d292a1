package schedule

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// Bounds limit a schedule to the fire times from From to Until, both
// included; a zero end is open.
type Bounds struct{ From, Until time.Time }

// Combine returns the schedule that fires at every fire time of any of
// parts (once where several fire together), within b. Its slot ids keep
// consecutive fires of the union distinct (see unionResolution); they do
// not depend on b, so moving a bound renames no slot. One part without
// bounds is returned as it is.
func Combine(parts []*Schedule, b Bounds) (*Schedule, error) {
	switch {
	case len(parts) == 0:
		return nil, errors.New("no schedule to combine")
	case !b.From.IsZero() && !b.Until.IsZero() && !b.From.Before(b.Until):
		return nil, fmt.Errorf("active_from %s is not before active_until %s",
			b.From.UTC().Format(time.RFC3339), b.Until.UTC().Format(time.RFC3339))
	case len(parts) == 1 && b == Bounds{}:
		return parts[0], nil
	}
	specs := make([]string, len(parts))
	for i, p := range parts {
		if p.parts != nil {
			return nil, errors.New("a combined schedule cannot be a part of another")
		}
		specs[i] = p.spec
	}
	s := &Schedule{
		spec:     strings.Join(specs, "; "),
		timezone: parts[0].timezone,
		loc:      parts[0].loc,
		parts:    parts,
		bounds:   Bounds{From: b.From.UTC(), Until: b.Until.UTC()},
	}
	s.res, s.maxGap = unionAnalysis(parts)
	return s, nil
}

type unionKey string

var unionCache sync.Map // unionKey -> [2]int64{res, maxGap}

// unionAnalysis returns the resolution and window of the union of parts.
//
// The resolution starts at the finest of the parts' own and is refined to
// the coarsest bucket that still separates the closest two consecutive
// fires of the union over the 8 sampled years from 2024 (at most
// maxGapSampleFires fires): two parts can fire a minute apart while each
// on its own is daily. The window is the shortest of the parts' windows,
// an upper bound of the union's longest gap.
func unionAnalysis(parts []*Schedule) (Resolution, time.Duration) {
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.spec + "\x00" + p.timezone + "\n")
	}
	key := unionKey(b.String())
	if v, ok := unionCache.Load(key); ok {
		a := v.([2]int64)
		return Resolution(a[0]), time.Duration(a[1])
	}
	res, maxGap := Year, parts[0].maxGap
	for _, p := range parts {
		res, maxGap = max(res, p.res), min(maxGap, p.maxGap)
	}
	minGap := time.Duration(1<<63 - 1)
	until := sampleAnchor.AddDate(maxGapSampleYears, 0, 0)
	prev := unionNext(parts, sampleAnchor)
	for i := 0; len(parts) > 1 && i < maxGapSampleFires && res < Second && !prev.IsZero() && prev.Before(until); i++ {
		next := unionNext(parts, prev)
		if next.IsZero() {
			break
		}
		minGap = min(minGap, next.Sub(prev))
		prev = next
	}
	for r := Year; r <= Second; r++ {
		if minGap >= resolutionBuckets[r] {
			res = max(res, r)
			break
		}
		if r == Second {
			res = Second
		}
	}
	unionCache.Store(key, [2]int64{int64(res), int64(maxGap)})
	return res, maxGap
}

// unionNext is the first fire of any part strictly after t.
func unionNext(parts []*Schedule, t time.Time) time.Time {
	var first time.Time
	for _, p := range parts {
		if n := p.Next(t); !n.IsZero() && (first.IsZero() || n.Before(first)) {
			first = n
		}
	}
	return first
}

// boundedNext is Next for a combined schedule.
func (s *Schedule) boundedNext(t time.Time) time.Time {
	if from := s.bounds.From; !from.IsZero() && t.Before(from) {
		t = from.Add(-time.Nanosecond)
	}
	n := unionNext(s.parts, t)
	if until := s.bounds.Until; !until.IsZero() && n.After(until) {
		return time.Time{}
	}
	return n
}

// boundedLatest is Latest for a combined schedule.
func (s *Schedule) boundedLatest(t time.Time) (time.Time, bool) {
	if until := s.bounds.Until; !until.IsZero() && t.After(until) {
		t = until
	}
	var last time.Time
	for _, p := range s.parts {
		if l, ok := p.Latest(t); ok && l.After(last) {
			last = l
		}
	}
	if last.IsZero() || (!s.bounds.From.IsZero() && last.Before(s.bounds.From)) {
		return time.Time{}, false
	}
	return last, true
}

// Following returns the first fire time strictly after t, as Next does,
// but past Until too: the default end of the window of the last slot
// before Until is where its schedule would have fired next.
func (s *Schedule) Following(t time.Time) time.Time {
	if s.parts == nil {
		return s.Next(t)
	}
	return unionNext(s.parts, t)
}

// Step returns Next(t) and Following(t), with one search where they are
// the same (a schedule not combined from parts): the fire loop needs both
// of every fire time, the next one to fire and the slot's window end.
func (s *Schedule) Step(t time.Time) (next, following time.Time) {
	next = s.Next(t)
	if s.parts == nil {
		return next, next
	}
	return next, unionNext(s.parts, t)
}

// Bounds returns the bounds of the schedule; zero for one from Parse.
func (s *Schedule) Bounds() Bounds { return s.bounds }

// Parts returns the schedules combined into s, or s alone.
func (s *Schedule) Parts() []*Schedule {
	if s.parts == nil {
		return []*Schedule{s}
	}
	return s.parts
}
