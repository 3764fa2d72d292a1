package schedule

import (
	"strings"
	"testing"
	"time"
)

func combine(t *testing.T, b Bounds, tz string, specs ...string) *Schedule {
	t.Helper()
	var parts []*Schedule
	for _, sp := range specs {
		parts = append(parts, mustParse(t, sp, tz))
	}
	s, err := Combine(parts, b)
	if err != nil {
		t.Fatalf("Combine(%q): %v", specs, err)
	}
	return s
}

func TestCombineUnion(t *testing.T) {
	for _, tc := range []struct {
		specs []string
		tz    string
		after string
		want  []string
		res   Resolution
	}{
		{[]string{"0 9 * * 1-5", "0 12 * * 6"}, "", "2024-01-05T00:00:00Z",
			[]string{"2024-01-05T09:00:00Z", "2024-01-06T12:00:00Z", "2024-01-08T09:00:00Z"}, Day},
		{[]string{"0 9 * * *", "0 17 * * *"}, "", "2024-01-05T00:00:00Z",
			[]string{"2024-01-05T09:00:00Z", "2024-01-05T17:00:00Z", "2024-01-06T09:00:00Z"}, Hour},
		// Each part is daily; together they fire 30 minutes apart.
		{[]string{"0 9 * * *", "30 9 * * *"}, "", "2024-01-05T00:00:00Z",
			[]string{"2024-01-05T09:00:00Z", "2024-01-05T09:30:00Z", "2024-01-06T09:00:00Z"}, Minute},
		// One instant in both parts fires once.
		{[]string{"0 0 * * *", "@daily", "0 0 1 * *"}, "", "2024-01-30T12:00:00Z",
			[]string{"2024-01-31T00:00:00Z", "2024-02-01T00:00:00Z", "2024-02-02T00:00:00Z"}, Day},
		{[]string{"0 0 L * *", "0 12 1 * *"}, "", "2024-01-15T00:00:00Z",
			[]string{"2024-01-31T00:00:00Z", "2024-02-01T12:00:00Z", "2024-02-29T00:00:00Z"}, Day},
		{[]string{"@every 90s", "0 * * * *"}, "", "2024-01-15T13:59:00Z",
			[]string{"2024-01-15T14:00:00Z", "2024-01-15T14:01:30Z"}, Second},
	} {
		t.Run(strings.Join(tc.specs, "|"), func(t *testing.T) {
			s := combine(t, Bounds{}, tc.tz, tc.specs...)
			at := utc(tc.after)
			for _, w := range tc.want {
				at = s.Next(at)
				if !at.Equal(utc(w)) {
					t.Fatalf("next fire = %v, want %s", at, w)
				}
				if l, ok := s.Latest(at.Add(time.Second)); !ok || !l.Equal(at) {
					t.Errorf("Latest(%v) = %v, %v", at.Add(time.Second), l, ok)
				}
			}
			if s.Resolution() != tc.res {
				t.Errorf("Resolution() = %v, want %v", s.Resolution(), tc.res)
			}
		})
	}
}

// Consecutive fires of unions get distinct ids, in zones with DST too.
func TestCombineIDsDistinct(t *testing.T) {
	t.Parallel()
	for _, tz := range []string{"", "Europe/Berlin", "Australia/Lord_Howe"} {
		for _, specs := range [][]string{
			{"0 9 * * *", "30 9 * * *"}, {"30 2 * * *", "0 3 * * *"}, {"0 * * * *", "30 2 * * *"},
			{"0 0 L * *", "0 0 1 * *"}, {"@monthly", "0 0 2 * *"}, {"0 9 * * 1#1", "0 9 * * 1L"},
		} {
			s := combine(t, Bounds{}, tz, specs...)
			for _, start := range []time.Time{utc("2024-01-01T00:00:00Z"), utc("2027-03-27T00:00:00Z"), utc("2026-10-24T00:00:00Z")} {
				prev := s.Next(start)
				for range propertyWalk(500) {
					next := s.Next(prev)
					if !next.After(prev) || s.SlotID(next) == s.SlotID(prev) {
						t.Fatalf("%v: %v then %v (ids %s, %s)", s, prev, next, s.SlotID(prev), s.SlotID(next))
					}
					prev = next
				}
			}
		}
	}
}

func TestCombineBounds(t *testing.T) {
	from, until := utc("2024-03-01T00:00:00Z"), utc("2024-03-03T09:00:00Z")
	s := combine(t, Bounds{From: from, Until: until}, "", "0 9 * * *")
	for _, tc := range []struct{ after, want string }{
		{"2024-01-01T00:00:00Z", "2024-03-01T09:00:00Z"},
		{"2024-03-01T09:00:00Z", "2024-03-02T09:00:00Z"},
		{"2024-03-02T09:00:00Z", "2024-03-03T09:00:00Z"}, // until is included
		{"2024-03-03T09:00:00Z", ""},
	} {
		got := s.Next(utc(tc.after))
		if (tc.want == "" && !got.IsZero()) || (tc.want != "" && !got.Equal(utc(tc.want))) {
			t.Errorf("Next(%s) = %v, want %q", tc.after, got, tc.want)
		}
	}
	if l, ok := s.Latest(utc("2025-01-01T00:00:00Z")); !ok || !l.Equal(until) {
		t.Errorf("Latest after until = %v, %v; want %v", l, ok, until)
	}
	if l, ok := s.Latest(utc("2024-03-01T08:00:00Z")); ok {
		t.Errorf("Latest before the first fire = %v, want none", l)
	}
	if f := s.Following(until); !f.Equal(utc("2024-03-04T09:00:00Z")) {
		t.Errorf("Following(until) = %v: the last slot's window ends where the spec would fire next", f)
	}
	for _, at := range []time.Time{from, utc("2024-03-02T09:00:00Z"), until} {
		if n, f := s.Step(at); !n.Equal(s.Next(at)) || !f.Equal(s.Following(at)) {
			t.Errorf("Step(%v) = %v, %v; want Next %v, Following %v", at, n, f, s.Next(at), s.Following(at))
		}
	}
	plain := combine(t, Bounds{}, "", "0 9 * * *")
	if n, f := plain.Step(until); !n.Equal(plain.Next(until)) || !f.Equal(n) {
		t.Errorf("unbounded Step(%v) = %v, %v; want Next twice, %v", until, n, f, plain.Next(until))
	}
	if s.Resolution() != Day || s.MaxGap() != 24*time.Hour {
		t.Errorf("Resolution %v, MaxGap %v: bounds change neither", s.Resolution(), s.MaxGap())
	}
	if !strings.Contains(s.String(), "until 2024-03-03T09:00:00Z") {
		t.Errorf("String() = %q", s.String())
	}
	// Open ends.
	s = combine(t, Bounds{From: from}, "", "0 9 * * *")
	if n := s.Next(utc("2030-01-01T00:00:00Z")); !n.Equal(utc("2030-01-01T09:00:00Z")) {
		t.Errorf("open until: Next = %v", n)
	}
	if _, err := Combine([]*Schedule{mustParse(t, "@hourly", "")}, Bounds{From: until, Until: from}); err == nil || !strings.Contains(err.Error(), "not before") {
		t.Errorf("from after until: %v", err)
	}
	one := mustParse(t, "@hourly", "")
	if c, _ := Combine([]*Schedule{one}, Bounds{}); c != one {
		t.Error("one part without bounds is not returned as is")
	}
}
