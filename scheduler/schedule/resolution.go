package schedule

import (
	"fmt"
	"math"
	"time"

	"github.com/robfig/cron/v3"
)

// Resolution is the granularity at which a schedule's slot ids are written.
// Larger values are finer.
type Resolution int

// Resolutions, coarsest first.
const (
	Year Resolution = iota + 1
	Month
	Day
	Hour
	Minute
	Second
)

var resolutionNames = [...]string{Year: "year", Month: "month", Day: "day", Hour: "hour", Minute: "minute", Second: "second"}

var resolutionLayouts = [...]string{
	Year:   "2006",
	Month:  "200601",
	Day:    "20060102",
	Hour:   "2006010215",
	Minute: "200601021504",
	Second: "20060102150405",
}

// bucket is the shortest gap that guarantees two instants fall in different
// UTC buckets of r: a month counts as 31 days and a year as 366.
var resolutionBuckets = [...]time.Duration{
	Year:   366 * 24 * time.Hour,
	Month:  31 * 24 * time.Hour,
	Day:    24 * time.Hour,
	Hour:   time.Hour,
	Minute: time.Minute,
	Second: time.Second,
}

// shortestBucket is the shortest UTC bucket of r: a month of 28 days, a
// year of 365. An invalid Resolution gets a second's, as Layout does.
func (r Resolution) shortestBucket() time.Duration {
	switch r {
	case Year:
		return 365 * 24 * time.Hour
	case Month:
		return 28 * 24 * time.Hour
	case Day:
		return 24 * time.Hour
	case Hour:
		return time.Hour
	case Minute:
		return time.Minute
	}
	return time.Second
}

func (r Resolution) valid() bool { return r >= Year && r <= Second }

// String returns "year", "month", "day", "hour", "minute" or "second".
func (r Resolution) String() string {
	if !r.valid() {
		return fmt.Sprintf("Resolution(%d)", int(r))
	}
	return resolutionNames[r]
}

// Layout returns the time layout of slot ids at r, e.g. "2006010215" for
// Hour. An invalid Resolution gets the finest layout, which never merges
// two fire times.
func (r Resolution) Layout() string {
	if !r.valid() {
		return resolutionLayouts[Second]
	}
	return resolutionLayouts[r]
}

func everyResolution(d time.Duration) Resolution {
	switch {
	case d%time.Minute != 0:
		return Second
	case d%time.Hour != 0:
		return Minute
	case d%(24*time.Hour) != 0:
		return Hour
	default:
		return Day
	}
}

// cronResolution derives the slot id resolution from the spec's structure,
// which is exact in UTC. In another zone, changes of UTC offset can bring
// consecutive fires closer in UTC than on the wall clock (a daily 00:30 in
// London fires twice on the UTC date of the spring change; a monthly
// midnight in Havana fires twice on 2026-11-01), and so can a fixed offset
// for month and year buckets (the 30th at 20:00 in UTC-5 falls on May 1 and
// May 31 in UTC). So it takes the smallest gap that can break the structural
// resolution and refines the resolution to the coarsest bucket that gap
// still separates: a month counts as 31 days, a year as 366.
func (s *Schedule) cronResolution(straddle gapRange) Resolution {
	c := s.cron
	res := structuralResolution(c, s.days)
	if s.zones == nil {
		return res
	}
	var minGap time.Duration
	switch res {
	case Second:
		return res
	case Minute:
		minGap = straddle.min
		if s.zones.minuteAligned {
			// Fires on distinct wall-clock minutes are distinct UTC
			// minutes when offsets are whole minutes, except a fire
			// shifted to the end of a gap and the one after it (03:00:00
			// and 03:00:30 CEST for "30 0,1 2,3 * * *" in Berlin): pairs
			// that straddlingGaps measures.
			if !s.wall {
				return res
			}
			break
		}
		until := sampleAnchor.AddDate(resolutionSampleYears, 0, 0)
		walk(c, s.days, s.zones, s.wall, sampleAnchor, until, resolutionSampleFires, func(prev, next time.Time) {
			minGap = min(minGap, next.Sub(prev))
		})
	case Hour, Day:
		// Between two offset changes, consecutive fires are a whole
		// number of wall-clock hours (days) apart, so only pairs that
		// straddle a change, or start with a fire shifted to it, can
		// share a UTC hour (day).
		minGap = straddle.min
	default:
		// At most 12 fires a year: look at every pair.
		minGap = straddle.min
		walk(c, s.days, s.zones, s.wall, sampleAnchor, analysisEnd, math.MaxInt, func(prev, next time.Time) {
			minGap = min(minGap, next.Sub(prev))
		})
	}
	for r := Year; r <= Second; r++ {
		if minGap >= resolutionBuckets[r] {
			return max(res, r)
		}
	}
	return Second
}

// structuralResolution is the coarsest resolution at which the fields of
// spec allow at most one fire per bucket (of the wall clock).
func structuralResolution(c *cron.SpecSchedule, days *dayRule) Resolution {
	switch {
	case countBits(c.Second) > 1:
		return Second
	case countBits(c.Minute) > 1:
		return Minute
	case countBits(c.Hour) > 1:
		return Hour
	case days != nil && !days.oncePerMonth():
		return Day
	case days == nil && (c.Dom&c.Dow&starBit != 0 || c.Dow&starBit == 0 || countBits(c.Dom) > 1):
		return Day
	case countBits(c.Month) > 1:
		return Month
	default:
		return Year
	}
}
