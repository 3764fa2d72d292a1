package schedule

import (
	"math"
	"time"
)

// gapRange is the smallest and largest of some gaps between consecutive fires.
type gapRange struct{ min, max time.Duration }

// straddlingGaps measures the gaps between consecutive fires that straddle a
// change of UTC offset from the anchor to analysisEnd, and (under the
// classic policy) the gap from a fire at a change to the next one, which
// may be a fire shifted out of the gap: the only gaps that differ from the
// wall-clock ones.
func (s *Schedule) straddlingGaps() gapRange {
	g := gapRange{min: math.MaxInt64}
	if s.zones == nil {
		return g
	}
	from, until := sampleAnchor.Unix(), analysisEnd.Unix()
	var before, after time.Time // the last pair measured
	for _, p := range s.zones.periods {
		change := time.Unix(p.start, 0).UTC()
		if p.start <= from || p.start >= until {
			continue // outside the range
		}
		if !before.Before(change) || after.Before(change) { // else straddled by the last pair already
			last := change.Add(-time.Second)
			next := s.Next(last)
			ok := true
			if !after.IsZero() && after.Before(change) {
				// The last pair ended before this change: step from its
				// end through the few fires of a sparse schedule, bisect
				// the many of a dense one.
				before = after
				for i := 0; ; i++ {
					n := s.Next(before)
					if n.After(last) {
						break
					}
					if i == 8 {
						before = s.bisect(n.Add(-time.Second), last, last)
						break
					}
					before = n
				}
			} else {
				before, ok = s.Latest(last)
			}
			after = next
			if ok {
				gap := after.Sub(before)
				g.min, g.max = min(g.min, gap), max(g.max, gap)
			}
		}
		if s.wall && p.shift > 0 && after.Equal(change) {
			// A fire at the change, perhaps shifted out of the gap: the
			// next fire can be closer than the wall clock says.
			if next := s.Next(change); !next.IsZero() {
				before, after = change, next
				gap := after.Sub(before)
				g.min, g.max = min(g.min, gap), max(g.max, gap)
			}
		}
	}
	return g
}

// cronMaxGap measures the longest gap between consecutive fires over the 8
// years from the anchor (until analysisEnd for schedules that fire at most
// monthly), and across every change of UTC offset until analysisEnd. Walking every fire of a dense spec ("* * 9-17 * * *" fires
// 32,400 times a day) is too slow and a capped walk would miss the overnight
// gap, so it first folds the seconds, the minutes and (with no change of
// offset) the hours field into their first value, which is exact while
// wall-clock minutes, hours and days are real ones: a gap of the full spec
// either lies inside one minute (hour, day) or runs from the last second
// (minute, hour) of one to the first of the next.
func (s *Schedule) cronMaxGap(straddle gapRange) time.Duration {
	c := *s.cron
	minuteAligned := s.zones == nil || s.zones.minuteAligned
	hourAligned := s.zones == nil || s.zones.hourAligned

	var best, shrink time.Duration // shrink: how much shorter the full spec's cross gaps are
	if secs := setBits(c.Second); len(secs) > 1 && minuteAligned {
		best = maxStep(secs) * time.Second
		shrink = time.Duration(secs[len(secs)-1]-secs[0]) * time.Second
		c.Second = 1 << secs[0]
	}
	if mins := setBits(c.Minute); len(mins) > 1 && countBits(c.Second) == 1 && hourAligned {
		best = max(best, maxStep(mins)*time.Minute-shrink)
		shrink += time.Duration(mins[len(mins)-1]-mins[0]) * time.Minute
		c.Minute = 1 << mins[0]
	}
	until := sampleAnchor.AddDate(maxGapSampleYears, 0, 0)
	if hours := setBits(c.Hour); len(hours) > 1 && countBits(c.Minute) == 1 && countBits(c.Second) == 1 &&
		s.zones.fixedOffset(sampleAnchor, until.Add(longestGap)) {
		// With one offset throughout, wall-clock days are real days too.
		best = max(best, maxStep(hours)*time.Hour-shrink)
		shrink += time.Duration(hours[len(hours)-1]-hours[0]) * time.Hour
		c.Hour = 1 << hours[0]
	}
	if structuralResolution(&c, s.days) <= Month {
		// At most 12 fires a year: walk them all, to catch the 8 years
		// between Feb 29, 2096 and Feb 29, 2104.
		until = analysisEnd
	}
	var sampled time.Duration
	walk(&c, s.days, s.zones, s.wall, sampleAnchor, until, maxGapSampleFires, func(prev, next time.Time) {
		sampled = max(sampled, next.Sub(prev))
	})
	return max(best, sampled-shrink, straddle.max)
}

// maxStep returns the largest difference between consecutive values.
func maxStep(vs []int) time.Duration {
	var m int
	for i := 1; i < len(vs); i++ {
		m = max(m, vs[i]-vs[i-1])
	}
	return time.Duration(m)
}
