package schedule

import (
	"math"
	"sort"
	"sync"
	"time"
)

// zoneTable lists a zone's periods of constant UTC offset from 2000 to 2200,
// each with a fixed-offset *time.Location. Immutable once built.
type zoneTable struct {
	periods []zonePeriod
	// minuteAligned: every offset is whole minutes and changes at a whole
	// minute, so a wall-clock minute is always one real minute.
	// hourAligned: moreover every change is a whole number of hours at a
	// wall-clock hour boundary, so a wall-clock hour is one real hour that
	// is either skipped or repeated whole (every zone but Lord Howe's).
	minuteAligned, hourAligned bool
}

type zonePeriod struct {
	start, end int64 // Unix seconds, [start, end); MinInt64/MaxInt64 when open
	offset     int
	shift      int // offset minus the previous period's; 0 for the first
	loc        *time.Location
}

var zoneTables sync.Map // zone name -> *zoneTable

func zoneTableFor(loc *time.Location) *zoneTable {
	if z, ok := zoneTables.Load(loc.String()); ok {
		return z.(*zoneTable)
	}
	z := buildZoneTable(loc)
	actual, _ := zoneTables.LoadOrStore(loc.String(), z)
	return actual.(*zoneTable)
}

func buildZoneTable(loc *time.Location) *zoneTable {
	from := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	to := time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)
	z := &zoneTable{minuteAligned: true, hourAligned: true}
	// ZoneBounds also reports boundaries where nothing changes (each New
	// Year once the zone's rules take over from its list of transitions,
	// and 2038-01-19), not always contiguously: build the periods from the
	// points where the offset really changes.
	start := int64(math.MinInt64)
	if s, _ := from.In(loc).ZoneBounds(); !s.IsZero() {
		start = s.Unix()
	}
	for t := from; ; {
		lt := t.In(loc)
		name, offset := lt.Zone()
		_, end := lt.ZoneBounds()
		endUnix := int64(math.MaxInt64)
		if !end.IsZero() {
			endUnix = end.Unix()
		}
		if n := len(z.periods); n > 0 && z.periods[n-1].offset == offset {
			z.periods[n-1].end = endUnix
		} else {
			if offset%60 != 0 {
				z.minuteAligned, z.hourAligned = false, false
			}
			if n > 0 {
				if mod(start, 60) != 0 {
					z.minuteAligned, z.hourAligned = false, false
				}
				if (offset-z.periods[n-1].offset)%3600 != 0 || mod(start+int64(offset), 3600) != 0 {
					z.hourAligned = false
				}
			}
			shift := 0
			if n > 0 {
				shift = offset - z.periods[n-1].offset
			}
			z.periods = append(z.periods, zonePeriod{start: start, end: endUnix, offset: offset, shift: shift, loc: time.FixedZone(name, offset)})
		}
		switch {
		case end.IsZero() || !end.Before(to):
			return z
		case !end.After(t):
			// ZoneBounds can return bounds that end at t, not after it
			// (at 2040-12-31, a leap year's last day, in rule-based
			// zones): look for a change within the day by hand.
			endUnix = changeWithinDay(loc, t, offset)
			z.periods[len(z.periods)-1].end = endUnix
		}
		t, start = time.Unix(endUnix, 0).UTC(), endUnix
	}
}

// changeWithinDay returns the first instant in the day from t at which
// loc's offset is no longer offset, or the end of that day.
func changeWithinDay(loc *time.Location, t time.Time, offset int) int64 {
	lo, hi := t.Unix(), t.Unix()+24*3600
	if _, off := time.Unix(hi, 0).In(loc).Zone(); off == offset {
		return hi
	}
	for hi-lo > 1 { // invariant: offset at lo, another offset at hi
		mid := lo + (hi-lo)/2
		if _, off := time.Unix(mid, 0).In(loc).Zone(); off == offset {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi
}

// fixedOffset reports whether the zone keeps one UTC offset from a to b; a
// nil table is UTC's.
func (z *zoneTable) fixedOffset(a, b time.Time) bool {
	if z == nil {
		return true
	}
	p, ok := z.lookup(a.Unix())
	return ok && p.end > b.Unix()
}

func (z *zoneTable) lookup(unix int64) (zonePeriod, bool) {
	i := sort.Search(len(z.periods), func(i int) bool { return unix < z.periods[i].end })
	if i == len(z.periods) || unix < z.periods[i].start {
		return zonePeriod{}, false
	}
	return z.periods[i], true
}
