package schedule

import (
	"fmt"
	"strings"
	"testing"
)

func TestHashResolves(t *testing.T) {
	for _, tc := range []struct {
		spec string
		ok   func(resolved string) bool
	}{
		{"H * * * *", func(r string) bool {
			var m int
			_, err := fmt.Sscanf(r, "%d * * * *", &m)
			return err == nil && m >= 0 && m < 60
		}},
		{"H(0-29) H(1-5) * * *", func(r string) bool {
			var m, h int
			_, err := fmt.Sscanf(r, "%d %d * * *", &m, &h)
			return err == nil && m <= 29 && h >= 1 && h <= 5
		}},
		{"H/15 * * * *", func(r string) bool {
			var k int
			_, err := fmt.Sscanf(r, "%d-59/15 * * * *", &k)
			return err == nil && k >= 0 && k < 15
		}},
		{"H(10-40)/10 * * * *", func(r string) bool {
			var k int
			_, err := fmt.Sscanf(r, "%d-40/10 * * * *", &k)
			return err == nil && k >= 10 && k < 20
		}},
		{"0 H H * *", func(r string) bool {
			var h, d int
			_, err := fmt.Sscanf(r, "0 %d %d * *", &h, &d)
			return err == nil && h < 24 && d >= 1 && d <= 28
		}},
		{"H 0 0 * * H", func(r string) bool {
			var s, d int
			_, err := fmt.Sscanf(r, "%d 0 0 * * %d", &s, &d)
			return err == nil && s < 60 && d <= 6
		}},
		{"0,H * * * *", func(r string) bool { return strings.HasPrefix(r, "0,") }},
		{"0 9 * * THU", func(r string) bool { return r == "0 9 * * THU" }}, // not an H
		{"@hourly", func(r string) bool { return r == "@hourly" }},
	} {
		s, err := Parse(tc.spec, "", HashKey("report-eu"))
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.spec, err)
			continue
		}
		if !tc.ok(s.Spec()) {
			t.Errorf("Parse(%q).Spec() = %q", tc.spec, s.Spec())
		}
		again, _ := Parse(tc.spec, "", HashKey("report-eu"))
		if again.Spec() != s.Spec() {
			t.Errorf("Parse(%q) twice: %q then %q", tc.spec, s.Spec(), again.Spec())
		}
	}
}

// 10,000 hourly tasks on "H * * * *" spread over the hour: every minute is
// used and none holds more than twice its share.
func TestHashSpreads(t *testing.T) {
	var per [60]int
	for i := range 10000 {
		s, err := Parse("H * * * *", "", HashKey(fmt.Sprintf("task-%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		var m int
		fmt.Sscanf(s.Spec(), "%d", &m)
		per[m]++
	}
	for m, n := range per {
		if n == 0 || n > 2*10000/60 {
			t.Errorf("minute %d: %d tasks of 10000 (per minute: %v)", m, n, per)
		}
	}
	a, _ := Parse("H H * * *", "", HashKey("a"))
	if a.Spec() == "H H * * *" {
		t.Fatal("not resolved")
	}
}

func TestHashErrors(t *testing.T) {
	for _, tc := range []struct{ spec, want string }{
		{"H(30-70) * * * *", "0 <= a <= b <= 59"},
		{"H(5-1) * * * *", "a <= b"},
		{"H(1-5 * * * *", "closing parenthesis"},
		{"H/0 * * * *", "H/n with n from 1 to 60"},
		{"H/61 * * * *", "H/n with n from 1 to 60"},
		{"Hx * * * *", "failed to parse"}, // not an H item: robfig's own error
		{"0 0 H(1-31) * *", "1 <= a <= b <= 28"},
	} {
		_, err := Parse(tc.spec, "", HashKey("t"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want an error with %q", tc.spec, err, tc.want)
		}
	}
	if _, err := Parse("H * * * *", ""); err == nil || !strings.Contains(err.Error(), "needs a key") {
		t.Errorf("H without a key: %v", err)
	}
}

// In UTC an H spec of single time-of-day values reuses the analysis of its
// template; it must equal the spec's own.
func TestHashTemplateAnalysisMatches(t *testing.T) {
	t.Parallel()
	for _, spec := range []string{"H H * * *", "H * * * *", "H H(8-17) * * 1-5", "0 H 1 * *", "H H H * * *", "H H L * *", "H H * * 5#2"} {
		for i := range propertyWalk(40) {
			s, err := Parse(spec, "", HashKey(fmt.Sprintf("tmpl-%d", i)))
			if err != nil {
				t.Fatal(err)
			}
			own, err := parse(s.Spec(), "", nil)
			if err != nil {
				t.Fatal(err)
			}
			if s.Resolution() != own.Resolution() || s.MaxGap() != own.MaxGap() {
				t.Fatalf("%q as %q: resolution %v, window %v; its own analysis says %v, %v",
					spec, s.Spec(), s.Resolution(), s.MaxGap(), own.Resolution(), own.MaxGap())
			}
		}
	}
	if _, tmpl, _ := resolveHash("H/15 * * * *", parseOptions{hashKey: "x", hasKey: true}); tmpl != "" {
		t.Errorf("H/15 has a template %q: its values are no shift of another's", tmpl)
	}
	if _, tmpl, _ := resolveHash("0 0 H * *", parseOptions{hashKey: "x", hasKey: true}); tmpl != "" {
		t.Errorf("H in the day of month has a template %q", tmpl)
	}
}
