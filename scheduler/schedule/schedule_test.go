package schedule

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
)

func mustParse(t testing.TB, spec, tz string) *Schedule {
	t.Helper()
	s, err := Parse(spec, tz)
	if err != nil {
		t.Fatalf("Parse(%q, %q): %v", spec, tz, err)
	}
	return s
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t.UTC()
}

func TestSlotID(t *testing.T) {
	for _, tc := range []struct {
		spec, tz string
		fire     string // a fire time of the schedule
		res      Resolution
		id       string
	}{
		{"0 * * * *", "", "2024-01-15T14:00:00Z", Hour, "2024011514"},
		{"30 * * * *", "", "2024-01-15T14:30:00Z", Hour, "2024011514"},
		{"@hourly", "UTC", "2024-01-15T14:00:00Z", Hour, "2024011514"},
		{"*/5 * * * *", "", "2024-01-15T14:30:00Z", Minute, "202401151430"},
		{"5 * * * * *", "", "2024-01-15T14:30:05Z", Minute, "202401151430"},
		{"*/5 * * * * *", "", "2024-01-15T14:30:05Z", Second, "20240115143005"},
		{"* * * * * *", "", "2024-01-15T14:30:05Z", Second, "20240115143005"},
		{"@daily", "", "2024-01-15T00:00:00Z", Day, "20240115"},
		{"@midnight", "", "2024-01-15T00:00:00Z", Day, "20240115"},
		{"@weekly", "", "2024-01-14T00:00:00Z", Day, "20240114"},
		{"0 9 * * 1", "", "2024-01-15T09:00:00Z", Day, "20240115"},
		{"0 0 1,15 * *", "", "2024-01-15T00:00:00Z", Day, "20240115"},
		{"0 0 1 * 1", "", "2024-01-15T00:00:00Z", Day, "20240115"}, // dom OR dow
		{"0 9,17 * * *", "", "2024-01-15T17:00:00Z", Hour, "2024011517"},
		{"@monthly", "", "2024-01-01T00:00:00Z", Month, "202401"},
		{"0 0 1 1,7 *", "", "2024-07-01T00:00:00Z", Month, "202407"},
		{"@yearly", "", "2024-01-01T00:00:00Z", Year, "2024"},
		{"@annually", "", "2024-01-01T00:00:00Z", Year, "2024"},
		{"0 0 29 2 *", "", "2028-02-29T00:00:00Z", Year, "2028"},
		{"@every 90s", "", "2024-01-15T14:30:00Z", Second, "20240115143000"},
		{"@every 5m", "", "2024-01-15T14:30:00Z", Minute, "202401151430"},
		{"@every 2h", "Europe/London", "2024-01-15T14:00:00Z", Hour, "2024011514"},
		{"@every 48h", "", "2024-01-16T00:00:00Z", Day, "20240116"},
		// DST brings a daily 00:30 in London twice onto some UTC dates.
		{"30 0 * * *", "Europe/London", "2024-03-31T00:30:00Z", Hour, "2024033100"},
		{"30 0 * * *", "Europe/London", "2024-03-31T23:30:00Z", Hour, "2024033123"},
		// Apr 1 00:00 BST is Mar 31 in UTC, the same UTC month as Mar 1.
		{"@monthly", "Europe/London", "2024-03-31T23:00:00Z", Day, "20240331"},
		// Midnight repeats in Havana on 2026-11-01, a Sunday: it fires
		// once, at the first midnight, so day ids still separate fires.
		{"@monthly", "America/Havana", "2026-11-01T04:00:00Z", Day, "20261101"},
		// A fixed offset can put two monthly fires in one UTC month.
		{"0 20 30 * *", "Etc/GMT+5", "2024-05-01T01:00:00Z", Day, "20240501"},
		{"0 20 30 * *", "Etc/GMT+5", "2024-05-31T01:00:00Z", Day, "20240531"},
		{"0 20 30 * *", "", "2024-04-30T20:00:00Z", Month, "202404"},
		// Lord Howe shifts by 30 minutes: 01:30 repeats 30 minutes later
		// and fires at the first; 02:15 is skipped and fires at 02:30.
		{"30 1 * * *", "Australia/Lord_Howe", "2024-04-06T14:30:00Z", Hour, "2024040614"},
		{"15 2 * * *", "Australia/Lord_Howe", "2024-10-05T15:30:00Z", Hour, "2024100515"},
		// 02:30 is shifted to 03:00 CEST, half an hour before 03:30 CEST:
		// one UTC hour holds two fires.
		{"30 2,3 * * *", "Europe/Berlin", "2027-03-28T01:00:00Z", Minute, "202703280100"},
		{"30 2,3 * * *", "Europe/Berlin", "2027-03-28T01:30:00Z", Minute, "202703280130"},
		// 6 fields: 03:00:00 CEST (shifted from 02:00:30 and 02:01:30) and
		// 03:00:30 CEST share a UTC minute.
		{"30 0,1 2,3 * * *", "Europe/Berlin", "2027-03-28T01:00:00Z", Second, "20270328010000"},
		{"30 0,1 2,3 * * *", "Europe/Berlin", "2027-03-28T01:00:30Z", Second, "20270328010030"},
		// A zone with no DST keeps the structural resolution.
		{"0 12 * * *", "Asia/Tokyo", "2024-01-15T03:00:00Z", Day, "20240115"},
	} {
		name := tc.spec + " " + tc.tz
		t.Run(name, func(t *testing.T) {
			s := mustParse(t, tc.spec, tc.tz)
			if got := s.Resolution(); got != tc.res {
				t.Errorf("Resolution() = %v, want %v", got, tc.res)
			}
			fire := utc(tc.fire)
			if got := s.Next(fire.Add(-time.Second)); !got.Equal(fire) {
				t.Fatalf("%v is not a fire time: Next(%v) = %v", fire, fire.Add(-time.Second), got)
			}
			if got := s.SlotID(fire); got != tc.id {
				t.Errorf("SlotID(%v) = %q, want %q", fire, got, tc.id)
			}
			if got := s.SlotID(fire.In(time.FixedZone("X", 5*3600))); got != tc.id {
				t.Errorf("SlotID of the same instant in another zone = %q, want %q", got, tc.id)
			}
		})
	}
}

func TestResolution(t *testing.T) {
	want := map[Resolution][2]string{
		Year:   {"year", "2006"},
		Month:  {"month", "200601"},
		Day:    {"day", "20060102"},
		Hour:   {"hour", "2006010215"},
		Minute: {"minute", "200601021504"},
		Second: {"second", "20060102150405"},
	}
	for r, w := range want {
		if r.String() != w[0] || r.Layout() != w[1] {
			t.Errorf("%d: String() = %q, Layout() = %q; want %q, %q", int(r), r.String(), r.Layout(), w[0], w[1])
		}
	}
	if Year >= Month || Month >= Day || Day >= Hour || Hour >= Minute || Minute >= Second {
		t.Error("resolutions are not ordered coarsest first")
	}
	var zero Resolution
	if zero.String() != "Resolution(0)" || zero.Layout() != Second.Layout() {
		t.Errorf("zero Resolution: %q, %q", zero.String(), zero.Layout())
	}
}

var propertyZones = []string{
	"", "Europe/London", "America/New_York", "Australia/Sydney", "Australia/Lord_Howe",
	"Asia/Kolkata", "America/Santiago", "America/Havana", "Pacific/Chatham", "Asia/Tokyo",
}

var propertySpecs = []string{
	"0 * * * *", "30 0 * * *", "30 1 * * *", "0 2 * * *", "0 0 * * *", "@daily", "@weekly",
	"@monthly", "@yearly", "0 0 1 1,7 *", "0 9 * * 1", "0 9,17 * * *", "0 0,30 1-3 * * *",
	"*/5 * * * *", "*/15 * * * * *", "15 45 23 * * *", "0 0 31 * *", "0 12 * 2 *",
	"30 2,3 * * *", "30 0,1 2,3 * * *", "0 */2 * * *", "15 2 * * *", "*/20 * 2 * * *",
	"@every 90s", "@every 1h", "@every 25h",
}

// propertyWalk is n, or a fifth of it (at least one) in a build with the race
// detector (race_test.go).
func propertyWalk(n int) int {
	if underRace {
		return max(n/5, 1)
	}
	return n
}

// For every spec and zone, the ids of 2,000 consecutive fires from several
// start points have one length and strictly increase.
func TestSlotIDsStrictlyIncrease(t *testing.T) {
	t.Parallel()
	starts := []time.Time{
		utc("2024-01-01T00:00:00Z"), utc("2025-03-29T12:00:00Z"),
		utc("2026-10-24T12:00:00Z"), utc("2031-06-15T07:13:00Z"),
	}
	for _, tz := range propertyZones {
		for _, spec := range propertySpecs {
			s := mustParse(t, spec, tz)
			for _, start := range starts {
				prevID := s.SlotID(s.Next(start))
				fire := s.Next(start)
				for range propertyWalk(2000) {
					fire = s.Next(fire)
					if fire.Year() > 2099 {
						break
					}
					id := s.SlotID(fire)
					if len(id) != len(prevID) || id <= prevID {
						t.Fatalf("%v: ids %q then %q at %v (resolution %v)", s, prevID, id, fire, s.Resolution())
					}
					prevID = id
				}
			}
		}
	}
}

func TestNextIsAnchoredForEvery(t *testing.T) {
	s := mustParse(t, "@every 90s", "Asia/Tokyo")
	for _, tc := range []struct{ after, want string }{
		{"1970-01-01T00:00:00Z", "1970-01-01T00:01:30Z"},
		{"2024-01-15T14:30:00Z", "2024-01-15T14:31:30Z"}, // 14:30 is a multiple of 90s
		{"2024-01-15T14:29:59Z", "2024-01-15T14:30:00Z"},
		{"1969-12-31T23:58:00Z", "1969-12-31T23:58:30Z"},
		{"1969-12-31T23:59:00Z", "1970-01-01T00:00:00Z"},
	} {
		if got := s.Next(utc(tc.after)); !got.Equal(utc(tc.want)) {
			t.Errorf("Next(%s) = %v, want %s", tc.after, got, tc.want)
		}
	}
	// Sub-second instants.
	at := utc("2024-01-15T14:30:00Z")
	if got := s.Next(at.Add(-time.Nanosecond)); !got.Equal(at) {
		t.Errorf("Next(just before a fire) = %v, want %v", got, at)
	}
	if got := s.Next(at.Add(time.Nanosecond)); !got.Equal(at.Add(90 * time.Second)) {
		t.Errorf("Next(just after a fire) = %v", got)
	}
}

func TestNext(t *testing.T) {
	for _, tc := range []struct{ spec, tz, after, want string }{
		{"0 * * * *", "", "2024-01-15T14:00:00Z", "2024-01-15T15:00:00Z"},
		{"0 * * * *", "", "2024-01-15T13:59:59Z", "2024-01-15T14:00:00Z"},
		{"0 9 * * *", "America/New_York", "2024-01-15T00:00:00Z", "2024-01-15T14:00:00Z"},
		{"0 9 * * *", "America/New_York", "2024-07-15T00:00:00Z", "2024-07-15T13:00:00Z"},
		// 01:30 does not exist in London on 2024-03-31: it fires at the
		// end of the gap, 02:00 BST.
		{"30 1 * * *", "Europe/London", "2024-03-30T12:00:00Z", "2024-03-31T01:00:00Z"},
		{"30 1 * * *", "Europe/London", "2024-03-31T01:00:00Z", "2024-04-01T00:30:00Z"},
		// 01:30 happens twice on 2024-10-27: only the first fires.
		{"30 1 * * *", "Europe/London", "2024-10-27T00:00:00Z", "2024-10-27T00:30:00Z"},
		{"30 1 * * *", "Europe/London", "2024-10-27T00:30:00Z", "2024-10-28T01:30:00Z"},
		// With "*" in the hour field, robfig's elapsed-time behaviour.
		{"30 * * * *", "Europe/London", "2024-03-31T00:30:00Z", "2024-03-31T01:30:00Z"},
		{"30 * * * *", "Europe/London", "2024-10-27T00:30:00Z", "2024-10-27T01:30:00Z"},
		// Feb 29 across 2100, which is not a leap year: beyond robfig's 5-year search.
		{"0 0 29 2 *", "", "2096-03-01T00:00:00Z", "2104-02-29T00:00:00Z"},
		{"0 0 29 2 *", "Europe/Paris", "2096-03-01T00:00:00Z", "2104-02-28T23:00:00Z"},
	} {
		s := mustParse(t, tc.spec, tc.tz)
		got := s.Next(utc(tc.after))
		if !got.Equal(utc(tc.want)) || got.Location() != time.UTC {
			t.Errorf("%v: Next(%s) = %v, want %s", s, tc.after, got, tc.want)
		}
	}
}

// Next matches robfig/cron's own search in the real zone, which it speeds up
// with fixed-offset periods, for specs with "*" in the hour field (the
// others, see TestNextMatchesClassicReference).
func TestNextMatchesRobfig(t *testing.T) {
	t.Parallel()
	parser := cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)
	for _, tz := range propertyZones {
		if tz == "Australia/Lord_Howe" {
			// robfig's own search is wrong across a 30-minute change: from
			// 01:54 on 2024-10-06 it returns 02:30 for "30 1 * * *".
			continue
		}
		loc, err := LoadLocation(tz)
		if err != nil {
			t.Fatal(err)
		}
		for _, spec := range propertySpecs {
			if strings.HasPrefix(spec, "@every") {
				continue
			}
			s := mustParse(t, spec, tz)
			if s.wall {
				continue
			}
			parsed, err := parser.Parse(spec)
			if err != nil {
				t.Fatal(err)
			}
			ref := *parsed.(*cron.SpecSchedule)
			ref.Location = loc
			// Around every change of offset from 2024 to 2030, then sparsely.
			var points []time.Time
			for at := utc("2024-01-01T00:00:00Z"); at.Year() < 2031; {
				_, end := at.In(loc).ZoneBounds()
				if end.IsZero() {
					break
				}
				for d := -26 * time.Hour; d < 26*time.Hour; d += 37*time.Minute + time.Second {
					points = append(points, end.Add(d))
				}
				at = end
			}
			for at := utc("2024-01-01T00:00:00Z"); at.Year() < 2150; at = at.Add(53*24*time.Hour + 13*time.Hour + 7*time.Second) {
				points = append(points, at)
			}
			for _, at := range points {
				want := ref.Next(at)
				if got := s.Next(at); !want.IsZero() && !got.Equal(want) {
					t.Fatalf("%v: Next(%v) = %v, robfig says %v", s, at, got, want)
				}
			}
		}
	}
}

func TestLatest(t *testing.T) {
	for _, tc := range []struct{ spec, tz, at, want string }{
		{"* * * * * *", "", "2024-01-15T14:30:05Z", "2024-01-15T14:30:05Z"},
		{"0 * * * *", "", "2024-01-15T14:00:00Z", "2024-01-15T14:00:00Z"},
		{"0 * * * *", "", "2024-01-15T14:59:59Z", "2024-01-15T14:00:00Z"},
		{"@yearly", "", "2024-12-31T23:59:59Z", "2024-01-01T00:00:00Z"},
		{"@yearly", "Europe/Paris", "2024-06-01T00:00:00Z", "2023-12-31T23:00:00Z"},
		{"0 0 29 2 *", "", "2101-01-01T00:00:00Z", "2096-02-29T00:00:00Z"},
		{"0 0 29 2 *", "", "2104-02-28T23:59:59Z", "2096-02-29T00:00:00Z"},
		{"0 0 29 2 *", "", "2104-02-29T00:00:00Z", "2104-02-29T00:00:00Z"},
		{"@every 90s", "", "2024-01-15T14:31:29Z", "2024-01-15T14:30:00Z"},
		{"@every 90s", "", "2024-01-15T14:31:30Z", "2024-01-15T14:31:30Z"},
		{"@every 1h", "", "1969-12-31T23:30:00Z", "1969-12-31T23:00:00Z"},
		{"30 1 * * *", "Europe/London", "2024-04-01T00:29:59Z", "2024-03-31T01:00:00Z"},
		{"30 1 * * *", "Europe/London", "2024-03-31T00:59:59Z", "2024-03-30T01:30:00Z"},
		{"30 1 * * *", "Europe/London", "2024-10-27T01:00:00Z", "2024-10-27T00:30:00Z"},
		{"30 1 * * *", "Europe/London", "2024-10-28T01:29:59Z", "2024-10-27T00:30:00Z"},
		{"0 2,3 * * *", "Europe/Berlin", "2027-03-28T01:59:59Z", "2027-03-28T01:00:00Z"},
	} {
		s := mustParse(t, tc.spec, tc.tz)
		got, ok := s.Latest(utc(tc.at))
		if !ok || !got.Equal(utc(tc.want)) || got.Location() != time.UTC {
			t.Errorf("%v: Latest(%s) = %v, %v; want %s", s, tc.at, got, ok, tc.want)
		}
	}
	// Sub-second instants.
	s := mustParse(t, "* * * * * *", "")
	at := utc("2024-01-15T14:30:05Z")
	if got, _ := s.Latest(at.Add(999 * time.Millisecond)); !got.Equal(at) {
		t.Errorf("Latest(5.999s) = %v, want %v", got, at)
	}
	if got, _ := s.Latest(at.Add(-time.Nanosecond)); !got.Equal(at.Add(-time.Second)) {
		t.Errorf("Latest(4.999999999s) = %v", got)
	}
}

// Latest(t) is a fire time <= t, and the next fire after it is after t.
func TestLatestProperty(t *testing.T) {
	t.Parallel()
	for _, tz := range propertyZones {
		for _, spec := range append(propertySpecs, "* * * * * *", "0 0 29 2 *", "0 0 0 1 1 *") {
			s := mustParse(t, spec, tz)
			step := (29*24*time.Hour + 3*time.Hour + 17*time.Minute + 7*time.Second + 123) * 5 / time.Duration(propertyWalk(5))
			for at := utc("2024-01-01T00:00:00Z"); at.Year() < 2030; at = at.Add(step) {
				l, ok := s.Latest(at)
				if !ok {
					t.Fatalf("%v: Latest(%v) found nothing", s, at)
				}
				if l.After(at) || !s.Next(l.Add(-time.Second)).Equal(l) || !s.Next(l).After(at) {
					t.Fatalf("%v: Latest(%v) = %v; Next(it-1s) = %v; Next(it) = %v", s, at, l, s.Next(l.Add(-time.Second)), s.Next(l))
				}
			}
		}
	}
}

func TestMaxGap(t *testing.T) {
	day := 24 * time.Hour
	for _, tc := range []struct {
		spec, tz string
		want     time.Duration
	}{
		{"* * * * * *", "", time.Second},
		{"*/5 * * * * *", "", 5 * time.Second},
		{"0,10,50 * * * * *", "", 40 * time.Second},
		{"0 * * * *", "", time.Hour},
		{"0 9,17 * * *", "", 16 * time.Hour},
		{"@daily", "", day},
		{"@daily", "Europe/London", 25 * time.Hour},
		{"0 9 * * 1-5", "", 3 * day},
		{"@weekly", "", 7 * day},
		{"@monthly", "", 31 * day},
		{"@yearly", "", 366 * day},
		{"0 0 29 2 *", "", 2921 * day}, // 2096-02-29 to 2104-02-29
		{"0 0 29 2 *", "Europe/London", 2921 * day},
		// Dense during the day, idle overnight: a capped walk would say 1s.
		{"* * 9-17 * * *", "", 15*time.Hour + time.Second},
		{"* * 9-17 * * *", "Europe/London", 16*time.Hour + time.Second},
		{"*/20 5,55 1-3 * * *", "", 21*time.Hour + 9*time.Minute + 20*time.Second},
		// Every minute in January.
		{"* * * 1 *", "", 335*day + time.Minute},
		{"0 */5 * * *", "", 5 * time.Hour},
		{"0 9,17 * * 1-5", "Asia/Tokyo", 64 * time.Hour},
		{"@every 90s", "", 90 * time.Second},
		{"@every 36h", "Europe/London", 36 * time.Hour},
	} {
		s := mustParse(t, tc.spec, tc.tz)
		if got := s.MaxGap(); got != tc.want {
			t.Errorf("%v: MaxGap() = %v, want %v", s, got, tc.want)
		}
	}
}

// The folded computation of MaxGap agrees with a plain walk over every fire.
func TestMaxGapMatchesWalk(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ spec, tz string }{
		{"*/20 5,55 1-3 * * *", "Europe/London"},
		{"0,30 0,10,20 0-2 * * *", "America/New_York"},
		{"15,45 * 2 * * *", "Australia/Sydney"},
		{"0 */7 * * 1-5", "America/Santiago"},
		{"0 0,45 1,2 * * *", "Australia/Lord_Howe"},
		{"0 5 */5 * * 1-5", ""},
		{"30 0,15 9,17 * * 1-5", "Asia/Tokyo"},
		// Fires shifted out of a gap, then an hour or a year of nothing.
		{"0,30 * 2 * 3,10 0", "Europe/Berlin"},
		{"30 0,1 2,3 * * *", "Europe/Berlin"},
		{"*/20 * 2 * * *", "Australia/Lord_Howe"},
		{"0 */2 * * *", "America/Havana"},
	} {
		s := mustParse(t, tc.spec, tc.tz)
		var want time.Duration
		until := sampleAnchor.AddDate(maxGapSampleYears, 0, 0)
		for f := s.Next(sampleAnchor); !f.After(until); {
			n := s.Next(f)
			want = max(want, n.Sub(f))
			f = n
		}
		if got := s.MaxGap(); got != want {
			t.Errorf("%v: MaxGap() = %v, a walk over every fire says %v", s, got, want)
		}
	}
}

// Spacing bounds density: no two fires of a walk over each schedule come
// closer than a bucket of its ids, so a span of n·Spacing holds at most n+1
// fires — what a done_ttl sized by it relies on to bound the markers kept.
func TestSpacingBoundsFiresPerSpan(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		spec, tz string
		want     time.Duration
	}{
		{"@every 1s", "", time.Second},
		{"@every 90s", "", 90 * time.Second},
		{"*/30 * * * * *", "", time.Second},
		{"59,0 * * * * *", "", time.Second}, // a second apart across a minute
		{"* * * * *", "", time.Minute},
		{"0 * * * *", "Asia/Kolkata", time.Hour},
		{"30 2 * * *", "Europe/Berlin", time.Hour}, // ids by the hour: a DST day shifts it
		{"30 2 * * *", "", 24 * time.Hour},
		{"0 0 1 * *", "", 28 * 24 * time.Hour},
	} {
		s := mustParse(t, tc.spec, tc.tz)
		sp := s.Spacing()
		if sp != tc.want {
			t.Errorf("%v: Spacing() = %v, want %v", s, sp, tc.want)
		}
		const n = 50 // spans of n·Spacing, each starting at a fire
		var fires []time.Time
		for f := s.Next(sampleAnchor); len(fires) < 2000; f = s.Next(f) {
			fires = append(fires, f)
		}
		for i := range fires {
			end := fires[i].Add(n * sp)
			j := i
			for j < len(fires) && fires[j].Before(end) {
				j++
			}
			if j == len(fires) {
				break
			}
			if j-i > n+1 {
				t.Fatalf("%v: %d fires within %v of %v, more than %d", s, j-i, n*sp, fires[i], n+1)
			}
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ spec, tz, want string }{
		{"", "", "empty"},
		{"   ", "", "empty"},
		{"0 0 30 2 *", "", "never fires"},
		{"0 0 31 4 *", "", "never fires"},
		{"TZ=Europe/Paris 0 * * * *", "", "timezone key"},
		{"CRON_TZ=Europe/Paris 0 * * * *", "", "timezone key"},
		{"TZ=", "", "timezone key"},
		{"0 * * * *", "Mars/Olympus_Mons", `"Mars/Olympus_Mons"`},
		{"0 * * * *", "Local", `"Local"`},
		{"@every 1500ms", "", "whole number of seconds"},
		{"@every 0s", "", "at least 1s"},
		{"@every -5s", "", "at least 1s"},
		{"@every", "", "@every <duration>"},
		{"@every 1m extra", "", "@every <duration>"},
		{"@every soon", "", "invalid duration"},
		{"@everyday", "", "unrecognized descriptor"},
		{"@fortnightly", "", "unrecognized descriptor"},
		{"* * * *", "", "fields"},
		{"* * * * * * *", "", "fields"},
		{"61 * * * *", "", "above maximum"},
		{"*/0 * * * *", "", "step"},
		{"a b c d e", "", "a"},
	} {
		_, err := Parse(tc.spec, tc.tz)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q, %q) = %v, want an error containing %q", tc.spec, tc.tz, err, tc.want)
		}
	}
}

func TestParseIsCached(t *testing.T) {
	t.Parallel()
	const n = 50
	got := make([]*Schedule, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { got[i] = mustParse(t, "7 */3 * * *", "Europe/Berlin") })
	}
	wg.Wait()
	for _, s := range got {
		if s != got[0] {
			t.Fatal("one spec and zone parsed into distinct schedules")
		}
	}
	if mustParse(t, "7 */3 * * *", "UTC") == got[0] {
		t.Fatal("the zone is not part of the cache key")
	}
}

func TestScheduleString(t *testing.T) {
	for _, tc := range []struct{ spec, tz, want string }{
		{"0 9 * * 1", "Europe/Paris", "0 9 * * 1 in Europe/Paris"},
		{" @daily ", "", "@daily in UTC"},
		{"@every 5m", "UTC", "@every 5m in UTC"},
	} {
		if got := mustParse(t, tc.spec, tc.tz).String(); got != tc.want {
			t.Errorf("String() = %q, want %q", got, tc.want)
		}
	}
}

func BenchmarkParse(b *testing.B) {
	for i := 0; b.Loop(); i++ {
		if _, err := parse(fmt.Sprintf("%d * * * *", i%60), "America/New_York", nil); err != nil {
			b.Fatal(err)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, seed := range [][2]string{
		{"0 * * * *", ""}, {"*/5 * * * * *", "UTC"}, {"@daily", "Europe/London"},
		{"@every 90s", ""}, {"0 0 29 2 *", "Australia/Lord_Howe"}, {"0 0 30 2 *", ""},
		{"TZ=UTC * * * * *", ""}, {"5-3/2 1,2 ? jan-mar mon-fri", "America/Havana"},
		{"@every 1h30m", "Asia/Kolkata"}, {"0 9 * * 1", "Nowhere/Special"},
	} {
		f.Add(seed[0], seed[1])
	}
	from := utc("2024-03-31T00:59:59Z")
	f.Fuzz(func(t *testing.T, spec, tz string) {
		s, err := Parse(spec, tz)
		if err != nil {
			return
		}
		next := s.Next(from)
		if next.IsZero() || !next.After(from) {
			t.Fatalf("%v: Next(%v) = %v", s, from, next)
		}
		if l, ok := s.Latest(next); !ok || !l.Equal(next) {
			t.Fatalf("%v: Latest(%v) = %v, %v", s, next, l, ok)
		}
		if n2 := s.Next(next); s.SlotID(n2) <= s.SlotID(next) {
			t.Fatalf("%v: ids %q then %q", s, s.SlotID(next), s.SlotID(n2))
		}
		if s.MaxGap() <= 0 {
			t.Fatalf("%v: MaxGap() = %v", s, s.MaxGap())
		}
	})
}

func ExampleSchedule_SlotID() {
	s, err := Parse("0 * * * *", "")
	if err != nil {
		panic(err)
	}
	slot := s.Next(time.Date(2024, 1, 15, 13, 59, 30, 0, time.UTC))
	fmt.Println(slot, s.Resolution(), s.SlotID(slot))
	// Output: 2024-01-15 14:00:00 +0000 UTC hour 2024011514
}
