package scheduler

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"sort"
	"strings"
	"sync"
	"time"
	_ "time/tzdata" // a host without /usr/share/zoneinfo must compute the same fire times as its peers

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

// Schedule is a parsed task schedule: when a task fires, in UTC, and how its
// slots are named. It is immutable and safe for concurrent use.
//
// A cron spec fires at every instant whose wall-clock reading in the
// schedule's zone matches the spec. Where a change of UTC offset (DST)
// skips or repeats wall times, the hour field decides:
//
//   - Hour field "*" (or "?", "*/1"; so also @hourly, "*/15 * * * *" and
//     every seconds-level spec with a "*" hour): the spec fires by elapsed
//     time, robfig/cron's behaviour. A skipped wall time does not fire, a
//     repeated one fires at both of its instants, so an hourly spec fires 23
//     and 25 times on the change days.
//   - Any other hour field (a value, a list, a range such as "1-3" or a
//     step such as "*/2"; so also @daily, @weekly, @monthly, @yearly): the
//     spec names wall-clock times and gets the classic cron (Vixie, cronie)
//     policy. A matching wall time that the change skips fires once, at the
//     first instant after the gap: 02:30 Europe/Berlin on 2027-03-28 fires
//     at 03:00 CEST (01:00Z). However many matching wall times the gap
//     holds, that is one fire, and none more if the spec also matches the
//     wall time just after the gap (03:00 in "0 2,3 * * *"). A matching
//     wall time that the change repeats fires once, at its first (earlier)
//     instant: 02:30 Europe/Berlin on 2026-10-25 fires at 02:30 CEST
//     (00:30Z) only. This holds for changes of any size (Lord Howe's 30
//     minutes too) between 2000 and 2200; outside those years (never a
//     fire time looked up in practice) robfig/cron's behaviour applies.
//
// Either way fire times are strictly increasing and depend only on the spec
// and zone. "@every D" fires at the multiples of D since the Unix epoch, in
// any zone, so every replica computes the same times whenever it started.
type Schedule struct {
	spec     string // as given, trimmed
	timezone string // as given; "" means UTC
	loc      *time.Location

	cron  *cron.SpecSchedule // nil for @every; Location is loc; never mutated
	zones *zoneTable         // nil when loc is UTC
	every time.Duration      // > 0 for @every
	// wall: the hour field is not "*", so the classic cron policy applies
	// to wall times skipped or repeated by a change of offset (see above).
	wall bool

	res    Resolution
	maxGap time.Duration
}

// The span analysed at parse time. It is fixed so that the derived
// resolution and window never depend on the current time: every replica,
// whenever it starts, names the same slot the same way.
var (
	sampleAnchor = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	// Changes of UTC offset are examined up to here, and so are all fires
	// of schedules that fire at most monthly.
	analysisEnd = time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
)

const (
	// longestGap bounds the search for a fire time: the sparsest valid cron
	// spec fires on Feb 29, and around a skipped leap year (2100) its fires
	// are 8 years apart.
	longestGap = (8*366 + 2) * 24 * time.Hour

	// The fallback walk for minute-level schedules in a zone whose offsets
	// are not whole minutes (none today).
	resolutionSampleYears = 2
	resolutionSampleFires = 20000

	maxGapSampleYears = 8
	// maxGapSampleFires caps the walk over a schedule that could not be
	// reduced to at most one fire per hour (only in zones whose DST shifts
	// are not whole hours); reduced schedules fire at most ~73,000 times in
	// 8 years.
	maxGapSampleFires = 100000
)

var descriptorParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

type scheduleKey struct{ spec, timezone string }

// scheduleCache holds every successfully parsed *Schedule by (spec,
// timezone): ten thousand tasks on one spec parse and sample it once.
var scheduleCache sync.Map // scheduleKey -> *Schedule

// ParseSchedule parses a robfig/cron/v3 spec (5 fields, 6 with leading
// seconds, or a descriptor such as @hourly or "@every 90s") in the IANA zone
// timezone ("" is UTC). It rejects specs that never fire (such as Feb 30) and
// "@every" durations that are not a whole number of seconds of at least 1s.
func ParseSchedule(spec, timezone string) (*Schedule, error) {
	key := scheduleKey{spec, timezone}
	if s, ok := scheduleCache.Load(key); ok {
		return s.(*Schedule), nil
	}
	s, err := parseSchedule(spec, timezone)
	if err != nil {
		return nil, err
	}
	actual, _ := scheduleCache.LoadOrStore(key, s)
	return actual.(*Schedule), nil
}

func parseSchedule(spec, timezone string) (*Schedule, error) {
	loc, err := loadLocation(timezone)
	if err != nil {
		return nil, err
	}
	spec = strings.TrimSpace(spec)
	s := &Schedule{spec: spec, timezone: timezone, loc: loc}
	switch {
	case spec == "":
		return nil, errors.New("empty schedule")
	case strings.HasPrefix(spec, "TZ=") || strings.HasPrefix(spec, "CRON_TZ="):
		return nil, fmt.Errorf("%q: a TZ= or CRON_TZ= prefix is not supported; set the task's timezone key instead", spec)
	case strings.HasPrefix(spec, "@every"):
		d, err := parseEvery(spec)
		if err != nil {
			return nil, err
		}
		s.every = d
		s.res = everyResolution(d)
		s.maxGap = d
		return s, nil
	}

	parsed, err := descriptorParser.Parse(spec)
	if err != nil {
		return nil, fmt.Errorf("%q: %w", spec, err)
	}
	sched, ok := parsed.(*cron.SpecSchedule)
	if !ok { // only @every yields another type, and it is handled above
		return nil, fmt.Errorf("%q: unsupported schedule type %T", spec, parsed)
	}
	c := *sched
	c.Location = loc
	s.cron = &c
	s.wall = c.Hour&starBit == 0
	if loc != time.UTC {
		s.zones = zoneTableFor(loc)
	}
	if s.Next(sampleAnchor).IsZero() {
		return nil, fmt.Errorf("%q never fires (no fire time within 8 years)", spec)
	}
	straddle := s.straddlingGaps()
	s.res = s.cronResolution(straddle)
	s.maxGap = s.cronMaxGap(straddle)
	return s, nil
}

// loadLocation resolves a task's timezone key. "Local" is refused: it means
// each machine's own setting, and replicas must agree on fire times.
func loadLocation(name string) (*time.Location, error) {
	switch name {
	case "", "UTC":
		return time.UTC, nil
	case "Local":
		return nil, fmt.Errorf("time zone %q depends on each host's setting; name an IANA zone such as \"Europe/Paris\" or \"UTC\"", name)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("unknown time zone %q (want an IANA name such as \"Europe/Paris\")", name)
	}
	return loc, nil
}

func parseEvery(spec string) (time.Duration, error) {
	f := strings.Fields(spec)
	if f[0] != "@every" {
		return 0, fmt.Errorf("%q: unrecognized descriptor %q", spec, f[0])
	}
	if len(f) != 2 {
		return 0, fmt.Errorf("%q: want \"@every <duration>\", such as \"@every 90s\"", spec)
	}
	d, err := time.ParseDuration(f[1])
	if err != nil {
		return 0, fmt.Errorf("%q: invalid duration %q", spec, f[1])
	}
	if d < time.Second || d%time.Second != 0 {
		return 0, fmt.Errorf("%q: @every needs a whole number of seconds, at least 1s", spec)
	}
	return d, nil
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

// Next returns the first fire time strictly after t, in UTC, or the zero
// Time if there is none within 8 years (which ParseSchedule rules out).
func (s *Schedule) Next(t time.Time) time.Time {
	if s.every > 0 {
		d := int64(s.every / time.Second)
		k := floorDiv(t.Unix(), d) + 1 // t.Unix() <= t, so k*d > t
		return time.Unix(k*d, 0).UTC()
	}
	return cronNext(s.cron, s.zones, s.wall, t)
}

// Latest returns the latest fire time at or before t, in UTC, and false if
// there is none within the 8 years before t.
func (s *Schedule) Latest(t time.Time) (time.Time, bool) {
	if s.every > 0 {
		d := int64(s.every / time.Second)
		return time.Unix(floorDiv(t.Unix(), d)*d, 0).UTC(), true
	}
	// Fire times are whole seconds, so the latest one <= t is the latest one
	// <= the whole second of t. Next is monotonic: search back with doubling
	// steps for a point lo whose next fire is <= t, then bisect (lo, hi) for
	// the last such point; its next fire is the answer.
	t = time.Unix(t.Unix(), 0).UTC()
	fired := func(u time.Time) bool {
		n := s.Next(u)
		return !n.IsZero() && !n.After(t)
	}
	hi := t // invariant: Next(hi) > t
	var lo time.Time
	for step := time.Second; ; step *= 2 {
		if step > longestGap {
			step = longestGap
		}
		u := t.Add(-step)
		if fired(u) {
			lo = u
			break
		}
		if step == longestGap {
			return time.Time{}, false
		}
		hi = u
	}
	return s.bisect(lo, hi, t), true
}

// bisect returns the latest fire time <= t, given whole seconds lo < hi
// with Next(lo) <= t < Next(hi).
func (s *Schedule) bisect(lo, hi, t time.Time) time.Time {
	for hi.Sub(lo) > time.Second {
		mid := lo.Add(hi.Sub(lo) / 2).Truncate(time.Second)
		if n := s.Next(mid); !n.IsZero() && !n.After(t) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return s.Next(lo)
}

// SlotID returns the id of the slot that fires at slot: its UTC time at the
// schedule's resolution, e.g. "2024011514" for an hourly schedule.
func (s *Schedule) SlotID(slot time.Time) string {
	return slot.UTC().Format(s.res.Layout())
}

// Resolution returns the resolution of slot ids: the coarsest at which
// consecutive fire times have distinct ids. It depends only on the spec and
// zone. See cronResolution for how it is derived for cron specs.
func (s *Schedule) Resolution() Resolution { return s.res }

// MaxGap returns the longest interval between consecutive fire times, which
// is the default slot window: D for "@every D"; for a cron spec, the longest
// gap over the 8 years from 2024-01-01 (until 2100 for one that fires at most
// monthly) and at every change of the zone's UTC offset until 2100.
func (s *Schedule) MaxGap() time.Duration { return s.maxGap }

// String returns the spec and its zone, e.g. "0 9 * * 1 in Europe/Paris".
func (s *Schedule) String() string {
	return s.spec + " in " + s.loc.String()
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

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
func cronNext(spec *cron.SpecSchedule, zones *zoneTable, wall bool, t time.Time) time.Time {
	horizon := t.Add(longestGap + 24*time.Hour)
	for !t.After(horizon) {
		first := t.Unix() + 1 // robfig's first candidate: the next whole second
		loc, offset, end := time.UTC, int64(0), int64(math.MaxInt64)
		if zones != nil {
			p, ok := zones.lookup(first)
			if !ok {
				return robfigNext(spec, t, horizon) // outside the table: slow but exact
			}
			loc, offset, end = p.loc, int64(p.offset), p.end
			switch {
			case !wall || p.shift == 0:
			case p.shift > 0:
				// Wall times [start+offset-shift, start+offset) are
				// skipped. lookup found first in [start, end), so
				// first == start when start is still a candidate.
				if first == p.start && wallMatchIn(spec, p.start+offset-int64(p.shift), p.start+offset) {
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
				return n.UTC()
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
func wallMatchIn(spec *cron.SpecSchedule, a, b int64) bool {
	for w := a; w < b; {
		tm := time.Unix(w, 0).UTC()
		if spec.Month&(1<<uint(tm.Month())) == 0 || !dayMatches(spec, tm) {
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
func robfigNext(spec *cron.SpecSchedule, t, horizon time.Time) time.Time {
	for !t.After(horizon) {
		if n := spec.Next(t); !n.IsZero() {
			return n.UTC()
		}
		t = t.AddDate(4, 0, 0)
	}
	return time.Time{}
}

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

func mod(a, b int64) int64 {
	m := a % b
	if m < 0 {
		m += b
	}
	return m
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

// walk calls fn(prev, next) for consecutive fires of spec, from the first
// fire after from, for every prev up to until, and at most limit times.
func walk(spec *cron.SpecSchedule, zones *zoneTable, wall bool, from, until time.Time, limit int, fn func(prev, next time.Time)) {
	prev := cronNext(spec, zones, wall, from)
	for i := 0; i < limit && !prev.IsZero() && !prev.After(until); i++ {
		next := cronNext(spec, zones, wall, prev)
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
	res := structuralResolution(c)
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
		walk(c, s.zones, s.wall, sampleAnchor, until, resolutionSampleFires, func(prev, next time.Time) {
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
		walk(c, s.zones, s.wall, sampleAnchor, analysisEnd, math.MaxInt, func(prev, next time.Time) {
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
func structuralResolution(c *cron.SpecSchedule) Resolution {
	switch {
	case countBits(c.Second) > 1:
		return Second
	case countBits(c.Minute) > 1:
		return Minute
	case countBits(c.Hour) > 1:
		return Hour
	case c.Dom&c.Dow&starBit != 0 || c.Dow&starBit == 0 || countBits(c.Dom) > 1:
		return Day
	case countBits(c.Month) > 1:
		return Month
	default:
		return Year
	}
}

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
	if structuralResolution(&c) <= Month {
		// At most 12 fires a year: walk them all, to catch the 8 years
		// between Feb 29, 2096 and Feb 29, 2104.
		until = analysisEnd
	}
	var sampled time.Duration
	walk(&c, s.zones, s.wall, sampleAnchor, until, maxGapSampleFires, func(prev, next time.Time) {
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
