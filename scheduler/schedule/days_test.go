package schedule

import (
	"strings"
	"testing"
	"time"
)

// Quartz's L, W and # in the day fields: the fire times after a point.
func TestNextDaySyntax(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		spec, tz, after string
		want            []string
		res             Resolution
	}{
		{"0 0 L * *", "", "2024-01-15T00:00:00Z",
			[]string{"2024-01-31T00:00:00Z", "2024-02-29T00:00:00Z", "2024-03-31T00:00:00Z", "2024-04-30T00:00:00Z"}, Month},
		{"0 0 L 2 *", "", "2024-03-01T00:00:00Z",
			[]string{"2025-02-28T00:00:00Z", "2026-02-28T00:00:00Z", "2027-02-28T00:00:00Z", "2028-02-29T00:00:00Z"}, Year},
		{"30 6 L-2 * *", "", "2024-02-01T00:00:00Z",
			[]string{"2024-02-27T06:30:00Z", "2024-03-29T06:30:00Z"}, Month},
		// June 15, 2024 is a Saturday: the Friday before. June 1 is a
		// Saturday: Monday the 3rd, not May 31.
		{"0 9 15W * *", "", "2024-06-01T00:00:00Z",
			[]string{"2024-06-14T09:00:00Z", "2024-07-15T09:00:00Z", "2024-08-15T09:00:00Z", "2024-09-16T09:00:00Z"}, Month},
		{"0 9 1W * *", "", "2024-05-15T00:00:00Z",
			[]string{"2024-06-03T09:00:00Z", "2024-07-01T09:00:00Z"}, Month},
		// 31W skips the months that have no 31st.
		{"0 9 31W * *", "", "2024-03-01T00:00:00Z",
			[]string{"2024-03-29T09:00:00Z", "2024-05-31T09:00:00Z"}, Month},
		// Aug 31, 2024 is a Saturday; Mar 31, 2024 a Sunday.
		{"0 18 LW * *", "", "2024-08-01T00:00:00Z",
			[]string{"2024-08-30T18:00:00Z", "2024-09-30T18:00:00Z"}, Month},
		{"0 9 * * 1#2", "", "2024-01-01T00:00:00Z",
			[]string{"2024-01-08T09:00:00Z", "2024-02-12T09:00:00Z", "2024-03-11T09:00:00Z"}, Month},
		{"0 9 * * MON#1,MON#3", "", "2024-01-01T00:00:00Z",
			[]string{"2024-01-01T09:00:00Z", "2024-01-15T09:00:00Z", "2024-02-05T09:00:00Z"}, Day},
		{"0 9 * * 5#5", "", "2024-01-01T00:00:00Z",
			[]string{"2024-03-29T09:00:00Z", "2024-05-31T09:00:00Z", "2024-08-30T09:00:00Z"}, Month},
		{"0 17 * * 5L", "", "2024-01-01T00:00:00Z",
			[]string{"2024-01-26T17:00:00Z", "2024-02-23T17:00:00Z", "2024-03-29T17:00:00Z"}, Month},
		{"0 17 ? * FRIL", "", "2024-01-01T00:00:00Z",
			[]string{"2024-01-26T17:00:00Z"}, Month},
		// Plain values share the list; dom and dow both restricted: either.
		{"0 0 1,L * *", "", "2024-01-15T00:00:00Z",
			[]string{"2024-01-31T00:00:00Z", "2024-02-01T00:00:00Z", "2024-02-29T00:00:00Z", "2024-03-01T00:00:00Z"}, Day},
		{"0 0 L * 1", "", "2024-01-26T00:00:00Z",
			[]string{"2024-01-29T00:00:00Z", "2024-01-31T00:00:00Z", "2024-02-05T00:00:00Z"}, Day},
		{"0 0 15 * 5L", "", "2024-01-01T00:00:00Z",
			[]string{"2024-01-15T00:00:00Z", "2024-01-26T00:00:00Z", "2024-02-15T00:00:00Z"}, Day},
		// Several a day, on the last day only.
		{"0 */12 L * *", "", "2024-01-30T00:00:00Z",
			[]string{"2024-01-31T00:00:00Z", "2024-01-31T12:00:00Z", "2024-02-29T00:00:00Z"}, Hour},
		// Seconds field.
		{"30 0 0 L * *", "", "2024-01-01T00:00:00Z",
			[]string{"2024-01-31T00:00:30Z"}, Month},
		// The last day of a month on the wall clock of New York is the
		// next UTC day.
		{"0 22 L * *", "America/New_York", "2024-01-02T00:00:00Z",
			[]string{"2024-02-01T03:00:00Z", "2024-03-01T03:00:00Z", "2024-04-01T02:00:00Z"}, Day},
		// March 31, 2024 is the last day of March and the day Berlin skips
		// 02:00-03:00: 02:30 fires at 03:00 CEST, the classic policy.
		{"30 2 L * *", "Europe/Berlin", "2024-03-01T00:00:00Z",
			[]string{"2024-03-31T01:00:00Z", "2024-04-30T00:30:00Z"}, Day},
		// The last Sunday of October repeats 02:30 in Berlin: once, at the
		// first.
		{"30 2 * * 0L", "Europe/Berlin", "2026-10-01T00:00:00Z",
			[]string{"2026-10-25T00:30:00Z", "2026-11-29T01:30:00Z"}, Day},
	} {
		t.Run(tc.spec+" "+tc.tz, func(t *testing.T) {
			s := mustParse(t, tc.spec, tc.tz)
			at := utc(tc.after)
			for _, w := range tc.want {
				at = s.Next(at)
				if !at.Equal(utc(w)) {
					t.Fatalf("next fire = %v, want %s", at, w)
				}
				if l, ok := s.Latest(at.Add(time.Second)); !ok || !l.Equal(at) {
					t.Errorf("Latest(%v) = %v, %v; want %v", at.Add(time.Second), l, ok, at)
				}
			}
			if got := s.Resolution(); got != tc.res {
				t.Errorf("Resolution() = %v, want %v", got, tc.res)
			}
		})
	}
}

// Consecutive fires of the day-syntax specs get distinct ids, and MaxGap
// bounds every gap, in zones with and without DST.
func TestDaySyntaxIDsAndGaps(t *testing.T) {
	t.Parallel()
	for _, tz := range []string{"", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Etc/GMT+5"} {
		for _, spec := range []string{"0 0 L * *", "30 2 L * *", "0 9 15W * *", "0 9 LW * *", "0 9 * * 1#2", "0 23 * * 0L", "0 */6 L-1 * *", "0 0 1,L * *"} {
			s := mustParse(t, spec, tz)
			prev := s.Next(utc("2024-01-01T00:00:00Z"))
			for range propertyWalk(400) {
				next := s.Next(prev)
				if s.SlotID(next) == s.SlotID(prev) {
					t.Fatalf("%v: %v and %v share id %s", s, prev, next, s.SlotID(next))
				}
				if gap := next.Sub(prev); gap > s.MaxGap() {
					t.Fatalf("%v: gap %v from %v exceeds MaxGap %v", s, gap, prev, s.MaxGap())
				}
				prev = next
			}
		}
	}
}

func TestDaySyntaxErrors(t *testing.T) {
	for _, tc := range []struct{ spec, want string }{
		{"0 0 L-31 * *", "L-n with n from 1 to 30"},
		{"0 0 32W * *", "nW with n from 1 to 31"},
		{"0 0 xW * *", "nW"},
		{"0 0 5#2 * *", "# belongs in the day-of-week field"},
		{"0 0 LX * *", "want L, L-n, nW or LW"},
		{"0 0 * * 5#6", "n from 1 to 5"},
		{"0 0 * * 9#1", "a weekday"},
		{"0 0 * * L", "name the weekday"},
		{"0 0 * * XL", "want dL"},
		{"0 0 L * 5W", "W belongs in the day-of-month field"},
		{"0 0 L,40 * *", "day of month"},
		{"0 0 * 2 5#5", "never fires"}, // a fifth Friday in February: 2036
	} {
		_, err := Parse(tc.spec, "")
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.spec) {
			t.Errorf("Parse(%q) = %v, want an error naming the spec and %q", tc.spec, err, tc.want)
		}
	}
}
