package schedule

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	_ "time/tzdata" // a host without /usr/share/zoneinfo must compute the same fire times as its peers

	"github.com/robfig/cron/v3"
)

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
	days  *dayRule           // nil unless a day field uses L, W or #; then cron's day fields are "*"
	zones *zoneTable         // nil when loc is UTC
	every time.Duration      // > 0 for @every
	// wall: the hour field is not "*", so the classic cron policy applies
	// to wall times skipped or repeated by a change of offset (see above).
	wall bool

	res    Resolution
	maxGap time.Duration

	// Set by Combine only: the union of parts, within bounds.
	parts  []*Schedule
	bounds Bounds
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

// Parse parses a robfig/cron/v3 spec (5 fields, 6 with leading
// seconds, or a descriptor such as @hourly or "@every 90s") in the IANA zone
// timezone ("" is UTC). It rejects specs that never fire (such as Feb 30) and
// "@every" durations that are not a whole number of seconds of at least 1s.
//
// Beyond robfig/cron, the day fields take Quartz's L, W and # (see
// dayRule), and any field Jenkins' H, resolved with the HashKey option
// (see resolveHash); Spec then returns the resolved spec.
func Parse(spec, timezone string, opts ...Option) (*Schedule, error) {
	var o parseOptions
	for _, opt := range opts {
		opt(&o)
	}
	spec, template, err := resolveHash(strings.TrimSpace(spec), o)
	if err != nil {
		return nil, err
	}
	key := scheduleKey{spec, timezone}
	if s, ok := scheduleCache.Load(key); ok {
		return s.(*Schedule), nil
	}
	var like *Schedule
	if template != "" && template != spec && (timezone == "" || timezone == "UTC") {
		if like, err = Parse(template, timezone); err != nil {
			like = nil // spec's own parse says what is wrong
		}
	}
	s, err := parse(spec, timezone, like)
	if err != nil {
		return nil, err
	}
	actual, _ := scheduleCache.LoadOrStore(key, s)
	return actual.(*Schedule), nil
}

// parse parses spec; like, if not nil, is a schedule whose fires are
// spec's shifted by a constant in UTC (see resolveHash), whose resolution
// and window spec shares.
func parse(spec, timezone string, like *Schedule) (*Schedule, error) {
	loc, err := LoadLocation(timezone)
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

	robfigSpec := spec
	if fields := strings.Fields(spec); !strings.HasPrefix(spec, "@") && (len(fields) == 5 || len(fields) == 6) {
		dom, dow := dayFieldsIndex(fields)
		if hasDaySyntax(fields[dom], fields[dow]) {
			if s.days, err = parseDayRule(fields[dom], fields[dow]); err != nil {
				return nil, fmt.Errorf("%q: %w", spec, err)
			}
			fields[dom], fields[dow] = "*", "*"
			robfigSpec = strings.Join(fields, " ")
		}
	}
	parsed, err := descriptorParser.Parse(robfigSpec)
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
	if like != nil && s.zones == nil {
		s.res, s.maxGap = like.res, like.maxGap
		return s, nil
	}
	straddle := s.straddlingGaps()
	s.res = s.cronResolution(straddle)
	s.maxGap = s.cronMaxGap(straddle)
	return s, nil
}

// LoadLocation resolves a timezone key as Parse does ("" is UTC). "Local"
// is refused: it means each machine's own setting, and replicas must agree
// on fire times.
func LoadLocation(name string) (*time.Location, error) {
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

// Next returns the first fire time strictly after t, in UTC, or the zero
// Time if there is none within 8 years (which Parse rules out) or none
// before the Until bound of a combined schedule.
func (s *Schedule) Next(t time.Time) time.Time {
	if s.parts != nil {
		return s.boundedNext(t)
	}
	if s.every > 0 {
		d := int64(s.every / time.Second)
		k := floorDiv(t.Unix(), d) + 1 // t.Unix() <= t, so k*d > t
		return time.Unix(k*d, 0).UTC()
	}
	return cronNext(s.cron, s.days, s.zones, s.wall, t)
}

// Latest returns the latest fire time at or before t, in UTC, and false if
// there is none within the 8 years before t.
func (s *Schedule) Latest(t time.Time) (time.Time, bool) {
	if s.parts != nil {
		return s.boundedLatest(t)
	}
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

// Spacing bounds how densely the schedule fires: at most one fire time in
// any Spacing-long stretch of UTC buckets, so a span T holds at most
// T/Spacing + 1 of them. It is D for "@every D"; otherwise the shortest
// UTC bucket of the slot ids' resolution (a second, a minute, an hour, a
// day, 28 days, 365 days), since no two fire times share an id.
func (s *Schedule) Spacing() time.Duration {
	if s.every > 0 {
		return s.every
	}
	return s.res.shortestBucket()
}

// Spec returns the spec as given to Parse, trimmed.
func (s *Schedule) Spec() string { return s.spec }

// String returns the spec and its zone, e.g. "0 9 * * 1 in Europe/Paris",
// and the bounds of a combined schedule.
func (s *Schedule) String() string {
	str := s.spec + " in " + s.loc.String()
	if !s.bounds.From.IsZero() {
		str += " from " + s.bounds.From.Format(time.RFC3339)
	}
	if !s.bounds.Until.IsZero() {
		str += " until " + s.bounds.Until.Format(time.RFC3339)
	}
	return str
}
