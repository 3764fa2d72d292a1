package schedule

import (
	"math"
	"math/bits"
	"time"

	"github.com/robfig/cron/v3"
)

// cronNext is the first instant after t whose wall clock in the schedule's
// zone matches spec. robfig/cron does the same, but in a zone with DST it
// costs ~20µs per call, because every field read goes through the zone's
// rules; sampling at parse time calls Next tens of thousands of times. So
// inside each period of constant UTC offset it runs robfig on a fixed-offset
// zone (as fast as UTC), which is exact there, and moves on to the next
// period when the match would fall beyond the current one.
//
// With wall set (the classic policy, see Schedule), a period that starts
// with a forward change first fires at its start if the spec matches a wall
// time in the gap, and a period that starts with a backward change does not
// fire while its wall clock repeats the previous period's.
//
// A day rule (days, nil for most specs) drops fires on the days it rejects:
// spec's own day fields are "*" then, so the search resumes at the next
// wall-clock midnight (or at the end of the period, whose next one may put
// midnight elsewhere).
func cronNext(spec *cron.SpecSchedule, days *dayRule, zones *zoneTable, wall bool, t time.Time) time.Time {
	horizon := t.Add(longestGap + 24*time.Hour)
	for !t.After(horizon) {
		first := t.Unix() + 1 // robfig's first candidate: the next whole second
		loc, offset, end := time.UTC, int64(0), int64(math.MaxInt64)
		if zones != nil {
			p, ok := zones.lookup(first)
			if !ok {
				return robfigNext(spec, days, t, horizon) // outside the table: slow but exact
			}
			loc, offset, end = p.loc, int64(p.offset), p.end
			switch {
			case !wall || p.shift == 0:
			case p.shift > 0:
				// Wall times [start+offset-shift, start+offset) are
				// skipped. lookup found first in [start, end), so
				// first == start when start is still a candidate.
				if first == p.start && wallMatchIn(spec, days, p.start+offset-int64(p.shift), p.start+offset) {
					return time.Unix(p.start, 0).UTC()
				}
			default:
				// Wall times [start+offset, start+offset-shift) were
				// read in the previous period already: skip them.
				first = max(first, p.start-int64(p.shift))
			}
		}
		// robfig steps through seconds and minutes one at a time; jump
		// straight to the first instant whose wall-clock minute and second
		// match, and let it search hours and days from there.
		cand := nextMinuteSecond(first+offset, spec.Second, spec.Minute) - offset
		if cand < end {
			fixed := *spec
			fixed.Location = loc
			n := fixed.Next(time.Unix(cand-1, 0).UTC())
			if !n.IsZero() && n.Unix() < end {
				w := n.Unix() + offset
				if days == nil || days.match(time.Unix(w, 0).UTC()) {
					return n.UTC()
				}
				midnight := w - mod(w, 86400) + 86400 - offset
				t = time.Unix(min(midnight, end)-1, 0).UTC()
				continue
			}
		}
		if end == math.MaxInt64 { // no match in the 5 years robfig searched
			t = time.Unix(cand-1, 0).UTC().AddDate(4, 0, 0)
			continue
		}
		// No match in [first, end): resume so that the next candidate is
		// end, in the next period.
		t = time.Unix(end-1, 0).UTC()
	}
	return time.Time{}
}

// wallMatchIn reports whether spec matches a wall-clock time in [a, b)
// (seconds since the epoch, read as if in UTC). It steps by days and hours,
// so a gap of a few hours (at most a day in practice) costs a few steps.
func wallMatchIn(spec *cron.SpecSchedule, days *dayRule, a, b int64) bool {
	for w := a; w < b; {
		tm := time.Unix(w, 0).UTC()
		if spec.Month&(1<<uint(tm.Month())) == 0 || !dayMatches(spec, tm) || (days != nil && !days.match(tm)) {
			w += 86400 - mod(w, 86400)
			continue
		}
		hourEnd := w + 3600 - mod(w, 3600)
		if spec.Hour&(1<<uint(tm.Hour())) != 0 {
			if c := nextMinuteSecond(w, spec.Second, spec.Minute); c < hourEnd {
				return c < b
			}
		}
		w = hourEnd
	}
	return false
}

// dayMatches is robfig/cron's rule: day of month and day of week must both
// match when either is "*", otherwise either may.
func dayMatches(spec *cron.SpecSchedule, t time.Time) bool {
	dom := spec.Dom&(1<<uint(t.Day())) != 0
	dow := spec.Dow&(1<<uint(t.Weekday())) != 0
	if spec.Dom&starBit != 0 || spec.Dow&starBit != 0 {
		return dom && dow
	}
	return dom || dow
}

// nextMinuteSecond returns the first wall-clock time >= w (seconds since the
// epoch, read as if in UTC) whose minute and second are in the robfig fields
// mins and secs.
func nextMinuteSecond(w int64, secs, mins uint64) int64 {
	secs, mins = secs&^starBit, mins&^starBit
	hour := w - mod(w, 3600)
	m, s := int(mod(w, 3600)/60), int(mod(w, 60))
	if mins&(1<<m) != 0 {
		if s2, ok := nextBit(secs, s); ok {
			return hour + int64(m*60+s2)
		}
	}
	firstSec := bits.TrailingZeros64(secs)
	if m2, ok := nextBit(mins, m+1); ok {
		return hour + int64(m2*60+firstSec)
	}
	return hour + 3600 + int64(bits.TrailingZeros64(mins)*60+firstSec)
}

// nextBit returns the smallest value >= from in set.
func nextBit(set uint64, from int) (int, bool) {
	if from >= 64 {
		return 0, false
	}
	if x := set >> from << from; x != 0 {
		return bits.TrailingZeros64(x), true
	}
	return 0, false
}

// robfigNext runs robfig's own search in the real zone; it gives up after
// about 5 years, so hop on until horizon.
func robfigNext(spec *cron.SpecSchedule, days *dayRule, t, horizon time.Time) time.Time {
	for !t.After(horizon) {
		n := spec.Next(t)
		if n.IsZero() {
			t = t.AddDate(4, 0, 0)
			continue
		}
		wall := n.In(spec.Location)
		if days == nil {
			return n.UTC()
		}
		if _, off := wall.Zone(); days.match(time.Unix(n.Unix()+int64(off), 0).UTC()) {
			return n.UTC()
		}
		y, m, d := wall.Date()
		t = time.Date(y, m, d+1, 0, 0, 0, 0, spec.Location).Add(-time.Second)
		if !t.After(n) {
			t = n
		}
	}
	return time.Time{}
}

// walk calls fn(prev, next) for consecutive fires of spec, from the first
// fire after from, for every prev up to until, and at most limit times.
func walk(spec *cron.SpecSchedule, days *dayRule, zones *zoneTable, wall bool, from, until time.Time, limit int, fn func(prev, next time.Time)) {
	prev := cronNext(spec, days, zones, wall, from)
	for i := 0; i < limit && !prev.IsZero() && !prev.After(until); i++ {
		next := cronNext(spec, days, zones, wall, prev)
		if next.IsZero() {
			return
		}
		fn(prev, next)
		prev = next
	}
}

const starBit = 1 << 63

func countBits(field uint64) int { return bits.OnesCount64(field &^ starBit) }

// setBits returns the values set in a robfig field, ascending.
func setBits(field uint64) []int {
	var vs []int
	for f := field &^ starBit; f != 0; f &= f - 1 {
		vs = append(vs, bits.TrailingZeros64(f))
	}
	return vs
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

func mod(a, b int64) int64 {
	m := a % b
	if m < 0 {
		m += b
	}
	return m
}
