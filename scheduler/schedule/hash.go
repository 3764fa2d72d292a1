package schedule

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
)

// Option changes how Parse reads a spec.
type Option func(*parseOptions)

type parseOptions struct {
	hashKey string
	hasKey  bool
}

// HashKey gives the key that an H in a cron field is hashed with: the
// task's name, so that every replica resolves a task's H alike and tasks
// with one spec spread over the field's range.
func HashKey(key string) Option {
	return func(o *parseOptions) { o.hashKey, o.hasKey = key, true }
}

// The range an H picks from, per field. The day of month stops at 28, as
// Jenkins' does, so that a hashed day exists in every month.
var hashFields = map[string][2]int{
	"second": {0, 59}, "minute": {0, 59}, "hour": {0, 23},
	"day of month": {1, 28}, "month": {1, 12}, "day of week": {0, 6},
}

var fieldNames5 = []string{"minute", "hour", "day of month", "month", "day of week"}

// hasHash reports whether a list item is Jenkins' H: "H", "H(a-b)", "H/n"
// or "H(a-b)/n".
func hasHash(item string) bool {
	return item == "H" || strings.HasPrefix(item, "H(") || strings.HasPrefix(item, "H/")
}

// resolveHash replaces each H in spec's fields with the value (or the
// stepped range) it stands for under key: H is lo + h mod (hi-lo+1) for the
// field's range [lo, hi] (or the item's own "(a-b)"), and H/n starts at lo
// + h mod n, where h is the FNV-1a 64 hash of key, a NUL byte and the
// field's name ("minute", "hour", ...). A spec without H is returned as is.
//
// template is the spec with every H at the lowest value it can take, when
// all of them are single values in the second, minute or hour field: the
// resolved spec then fires at the template's times shifted by a constant
// within the day, so in UTC it has the template's gaps and resolution,
// which Parse reuses instead of sampling each of 1,440 "H H * * *" specs.
// Otherwise template is "".
func resolveHash(spec string, o parseOptions) (resolved, template string, err error) {
	if strings.HasPrefix(spec, "@") || !strings.Contains(spec, "H") {
		return spec, "", nil
	}
	fields := strings.Fields(spec)
	names := fieldNames5
	switch len(fields) {
	case 5:
	case 6:
		names = append([]string{"second"}, fieldNames5...)
	default:
		return spec, "", nil // robfig says what is wrong
	}
	changed, shiftable := false, true
	tmpl := make([]string, len(fields))
	for i, f := range fields {
		items := strings.Split(f, ",")
		tItems := make([]string, len(items))
		for j, it := range items {
			tItems[j] = it
			if !hasHash(it) {
				continue
			}
			if !o.hasKey {
				return "", "", fmt.Errorf("%q: H in the %s field needs a key to hash (the task's name)", spec, names[i])
			}
			v, err := hashItem(it, names[i], o.hashKey)
			if err != nil {
				return "", "", fmt.Errorf("%q: %s field %q: %w", spec, names[i], it, err)
			}
			items[j], changed = v, true
			timeOfDay := names[i] == "second" || names[i] == "minute" || names[i] == "hour"
			if strings.Contains(it, "/") || !timeOfDay || len(items) > 1 {
				shiftable = false
			}
			tItems[j] = strconv.Itoa(hashFloor(it, names[i]))
		}
		fields[i] = strings.Join(items, ",")
		tmpl[i] = strings.Join(tItems, ",")
	}
	if !changed {
		return spec, "", nil
	}
	if !shiftable {
		return strings.Join(fields, " "), "", nil
	}
	return strings.Join(fields, " "), strings.Join(tmpl, " "), nil
}

// hashFloor is the lowest value a valid single-value H item can take.
func hashFloor(item, field string) int {
	lo := hashFields[field][0]
	if a, _, ok := strings.Cut(strings.TrimPrefix(item, "H("), "-"); ok && strings.HasPrefix(item, "H(") {
		if x, err := strconv.Atoi(a); err == nil {
			return x
		}
	}
	return lo
}

func hashItem(item, field, key string) (string, error) {
	lo, hi := hashFields[field][0], hashFields[field][1]
	rest := item[1:]
	if strings.HasPrefix(rest, "(") {
		end := strings.Index(rest, ")")
		if end < 0 {
			return "", fmt.Errorf("want H(a-b), with a closing parenthesis")
		}
		a, b, ok := strings.Cut(rest[1:end], "-")
		x, errA := strconv.Atoi(a)
		y, errB := strconv.Atoi(b)
		if !ok || errA != nil || errB != nil || x < lo || y > hi || x > y {
			return "", fmt.Errorf("want H(a-b) with %d <= a <= b <= %d", lo, hi)
		}
		lo, hi, rest = x, y, rest[end+1:]
	}
	h := fnv.New64a()
	h.Write([]byte(key))
	h.Write([]byte{0})
	h.Write([]byte(field))
	sum := h.Sum64()
	switch {
	case rest == "":
		return strconv.Itoa(lo + int(sum%uint64(hi-lo+1))), nil
	case strings.HasPrefix(rest, "/"):
		n, err := strconv.Atoi(rest[1:])
		if err != nil || n < 1 || n > hi-lo+1 {
			return "", fmt.Errorf("want H/n with n from 1 to %d", hi-lo+1)
		}
		return fmt.Sprintf("%d-%d/%d", lo+int(sum%uint64(n)), hi, n), nil
	}
	return "", fmt.Errorf("want H, H(a-b), H/n or H(a-b)/n")
}
