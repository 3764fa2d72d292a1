package schedule

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// dayRule matches days for a spec whose day-of-month or day-of-week field
// uses Quartz's L, W or #, which robfig/cron does not parse. The spec's
// other fields stay robfig's; its day fields are relaxed to "*" there and
// cronNext drops the fires on days this rule rejects.
//
// Day of month:  L (last day), L-n (n days before the last), nW (the
// weekday nearest the n-th, within its month), LW (the last weekday).
// Day of week:   d#n (the n-th weekday d of the month, n 1..5), dL (the
// last weekday d of the month).
// Plain values, ranges and steps may share the field's list ("1,L").
// As in robfig/cron, when either field is "*" or "?" a day must match both;
// otherwise it matches either.
type dayRule struct {
	dom, dow uint64 // robfig bits of the plain items; starBit when "*" or "?"
	domItems []domItem
	dowItems []dowItem
}

type domItem struct {
	kind byte // 'L': last day minus n; 'W': weekday nearest n; 'V': last weekday
	n    int
}

type dowItem struct {
	weekday time.Weekday
	nth     int // 1..5; 0 means the last one of the month
}

// hasDaySyntax reports whether the day fields use L, W or # (weekday
// names hold no L and no #; WED's W is not the day-of-month W).
func hasDaySyntax(dom, dow string) bool {
	if strings.ContainsAny(strings.ToUpper(dom), "LW#") || strings.Contains(dow, "#") {
		return true
	}
	for _, it := range strings.Split(strings.ToUpper(dow), ",") {
		if strings.HasSuffix(it, "L") {
			return true
		}
	}
	return false
}

// dayFieldsIndex returns the indexes of the day-of-month and day-of-week
// fields of a 5- or 6-field spec.
func dayFieldsIndex(fields []string) (dom, dow int) {
	return len(fields) - 3, len(fields) - 1
}

// parseDayRule parses the day fields of a spec that hasDaySyntax flagged.
func parseDayRule(domField, dowField string) (*dayRule, error) {
	r := &dayRule{}
	var err error
	if r.dom, r.domItems, err = parseDomField(domField); err != nil {
		return nil, err
	}
	if r.dow, r.dowItems, err = parseDowField(dowField); err != nil {
		return nil, err
	}
	return r, nil
}

// plainBits has robfig parse the plain items of a day field, placed in a
// spec of their own.
func plainBits(plain []string, dom bool) (uint64, error) {
	if len(plain) == 0 {
		return 0, nil
	}
	spec := "0 0 * * " + strings.Join(plain, ",")
	if dom {
		spec = "0 0 " + strings.Join(plain, ",") + " * *"
	}
	s, err := cron.ParseStandard(spec)
	if err != nil {
		return 0, err
	}
	if dom {
		return s.(*cron.SpecSchedule).Dom, nil
	}
	return s.(*cron.SpecSchedule).Dow, nil
}

func parseDomField(field string) (uint64, []domItem, error) {
	var plain []string
	var items []domItem
	for _, it := range strings.Split(field, ",") {
		u := strings.ToUpper(it)
		switch {
		case u == "L":
			items = append(items, domItem{kind: 'L'})
		case u == "LW":
			items = append(items, domItem{kind: 'V'})
		case strings.HasPrefix(u, "L-"):
			n, err := strconv.Atoi(u[2:])
			if err != nil || n < 1 || n > 30 {
				return 0, nil, fmt.Errorf("day of month %q: want L-n with n from 1 to 30 (days before the last)", it)
			}
			items = append(items, domItem{kind: 'L', n: n})
		case strings.HasSuffix(u, "W"):
			n, err := strconv.Atoi(u[:len(u)-1])
			if err != nil || n < 1 || n > 31 {
				return 0, nil, fmt.Errorf("day of month %q: want nW with n from 1 to 31 (the weekday nearest the n-th), or LW", it)
			}
			items = append(items, domItem{kind: 'W', n: n})
		case strings.Contains(u, "#"):
			return 0, nil, fmt.Errorf("day of month %q: # belongs in the day-of-week field (5#3: the third Friday)", it)
		case strings.ContainsAny(u, "LW"):
			return 0, nil, fmt.Errorf("day of month %q: want L, L-n, nW or LW", it)
		default:
			plain = append(plain, it)
		}
	}
	bits, err := plainBits(plain, true)
	if err != nil {
		return 0, nil, fmt.Errorf("day of month %q: %w", field, err)
	}
	return bits, items, nil
}

var weekdayNames = map[string]int{"SUN": 0, "MON": 1, "TUE": 2, "WED": 3, "THU": 4, "FRI": 5, "SAT": 6}

func parseWeekday(s string) (time.Weekday, bool) {
	if d, ok := weekdayNames[s]; ok {
		return time.Weekday(d), true
	}
	d, err := strconv.Atoi(s)
	if err != nil || d < 0 || d > 7 {
		return 0, false
	}
	return time.Weekday(d % 7), true
}

func parseDowField(field string) (uint64, []dowItem, error) {
	var plain []string
	var items []dowItem
	for _, it := range strings.Split(field, ",") {
		u := strings.ToUpper(it)
		switch {
		case strings.Contains(u, "#"):
			d, n, _ := strings.Cut(u, "#")
			wd, ok := parseWeekday(d)
			nth, err := strconv.Atoi(n)
			if !ok || err != nil || nth < 1 || nth > 5 {
				return 0, nil, fmt.Errorf("day of week %q: want d#n, a weekday (0-7 or SUN-SAT) and n from 1 to 5 (5#3: the third Friday)", it)
			}
			items = append(items, dowItem{weekday: wd, nth: nth})
		case u == "L":
			return 0, nil, fmt.Errorf("day of week %q: name the weekday (5L: the last Friday of the month), or put L in the day of month (the last day)", it)
		case strings.HasSuffix(u, "L"):
			wd, ok := parseWeekday(u[:len(u)-1])
			if !ok {
				return 0, nil, fmt.Errorf("day of week %q: want dL, a weekday (0-7 or SUN-SAT) then L (5L: the last Friday)", it)
			}
			items = append(items, dowItem{weekday: wd})
		case strings.Contains(u, "W"):
			return 0, nil, fmt.Errorf("day of week %q: W belongs in the day-of-month field (15W: the weekday nearest the 15th)", it)
		default:
			plain = append(plain, it)
		}
	}
	bits, err := plainBits(plain, false)
	if err != nil {
		return 0, nil, fmt.Errorf("day of week %q: %w", field, err)
	}
	return bits, items, nil
}

// match reports whether the rule allows the day of wall, a wall-clock time
// read as if in UTC.
func (r *dayRule) match(wall time.Time) bool {
	y, m, d := wall.Date()
	last := time.Date(y, m+1, 0, 0, 0, 0, 0, time.UTC).Day()
	wd := wall.Weekday()
	domOK := r.dom&(1<<uint(d)) != 0
	for _, it := range r.domItems {
		if domOK {
			break
		}
		switch it.kind {
		case 'L':
			domOK = d == last-it.n
		case 'W':
			domOK = it.n <= last && d == nearestWeekday(y, m, it.n, last)
		case 'V':
			domOK = d == nearestWeekday(y, m, last, last)
		}
	}
	dowOK := r.dow&(1<<uint(wd)) != 0
	for _, it := range r.dowItems {
		if dowOK {
			break
		}
		if wd == it.weekday {
			if it.nth == 0 {
				dowOK = d+7 > last
			} else {
				dowOK = (d-1)/7+1 == it.nth
			}
		}
	}
	if r.dom&starBit != 0 || r.dow&starBit != 0 {
		return domOK && dowOK
	}
	return domOK || dowOK
}

// nearestWeekday is Quartz's nW: the n-th if it is a weekday, else the
// nearest weekday in the same month (a Saturday the 1st gives Monday the
// 3rd, a Sunday the last gives the Friday before).
func nearestWeekday(y int, m time.Month, n, last int) int {
	switch time.Date(y, m, n, 0, 0, 0, 0, time.UTC).Weekday() {
	case time.Saturday:
		if n == 1 {
			return 3
		}
		return n - 1
	case time.Sunday:
		if n == last {
			return n - 2
		}
		return n + 1
	}
	return n
}

// oncePerMonth reports whether the rule picks at most one day a month.
func (r *dayRule) oncePerMonth() bool {
	switch {
	case r.dom&starBit != 0:
		return countBits(r.dow) == 0 && len(r.dowItems) == 1
	case r.dow&starBit != 0:
		return countBits(r.dom) == 0 && len(r.domItems) == 1
	}
	return false
}
