package config

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// problems collects every error found in one configuration.
type problems struct {
	source string
	errs   []error
	check  Checker // nil: plugins and store support unchecked
}

func (p *problems) add(err error) {
	if p.source != "" {
		err = fmt.Errorf("%s: %w", p.source, err)
	}
	p.errs = append(p.errs, err)
}

func (p *problems) err() error { return errors.Join(p.errs...) }

// table is one TOML table being read: a section, or one [[task]].
type table struct {
	m     map[string]any // nil when the table is absent
	path  string         // its key path, dotted ("plugins.http"), "" at the top
	scope string         // for a task, `task "name" (task #2)`
	p     *problems
}

// key returns how errors name key: its full path in a section ("daemon.replica"),
// its own name within a task's scope ("lease").
func (t table) key(key string) string {
	if t.scope != "" {
		return toml.Key{key}.String()
	}
	return t.full(key).String()
}

// full returns the full path of key in t.
func (t table) full(key string) toml.Key {
	if t.path == "" {
		return toml.Key{key}
	}
	return append(strings.Split(t.path, "."), key)
}

func (t table) prefix() string {
	if t.scope != "" {
		return t.scope + ": "
	}
	return ""
}

func (t table) errorf(key, format string, args ...any) {
	t.p.add(fmt.Errorf("%s%s: %s", t.prefix(), t.key(key), fmt.Sprintf(format, args...)))
}

func (t table) wrapf(key string, err error) {
	t.p.add(fmt.Errorf("%s%s: %w", t.prefix(), t.key(key), err))
}

func (t table) has(key string) bool {
	_, ok := t.m[key]
	return ok
}

// sub returns the section key of t, a section or the top-level table,
// checking its keys.
func (t table) sub(key string, allowed []string) table {
	s := table{path: key, p: t.p}
	if t.path != "" {
		s.path = t.path + "." + key
	}
	v, ok := t.m[key]
	if !ok {
		return s
	}
	m, isTable := v.(map[string]any)
	if !isTable {
		t.errorf(key, "must be a table ([%s]), not %s", s.path, tomlType(v))
		return s
	}
	s.m = m
	s.checkKeys(allowed)
	return s
}

// checkKeys reports every key of t that is not in allowed, by its full path
// (such as "task.retries"); the contents of unknown tables are not
// reported again.
func (t table) checkKeys(allowed []string) {
	var unknown []string
	for k := range t.m {
		if !slices.Contains(allowed, k) {
			unknown = append(unknown, k)
		}
	}
	slices.Sort(unknown)
	for _, k := range unknown {
		t.p.add(fmt.Errorf("%sunknown key %q (known keys here: %s)", t.prefix(), t.full(k).String(), strings.Join(allowed, ", ")))
	}
}

// str returns the string at key; false if it is absent or not a string
// (reported).
func (t table) str(key string) (string, bool) {
	v, ok := t.m[key]
	if !ok {
		return "", false
	}
	s, ok := v.(string)
	if !ok {
		t.errorf(key, "must be a string, not %s", tomlType(v))
	}
	return s, ok
}

// positive returns the positive duration at key; false if it is absent or
// invalid (reported).
func (t table) positive(key string) (time.Duration, bool) {
	o := t.duration(key, positive)
	return o.v, o.set && !o.bad
}

// duration reads a duration string such as "15s" at key; check returns a
// problem with a well-formed value, or "".
func (t table) duration(key string, check func(time.Duration) string) opt[time.Duration] {
	v, ok := t.m[key]
	if !ok {
		return opt[time.Duration]{}
	}
	o := opt[time.Duration]{set: true, bad: true}
	s, ok := v.(string)
	if !ok {
		t.errorf(key, "must be a duration string such as \"15s\", \"10m\" or \"1h30m\", not %s", tomlType(v))
		return o
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		t.errorf(key, "%q: invalid duration (want a number with a unit: \"500ms\", \"15s\", \"10m\", \"1h30m\")", s)
		return o
	}
	if msg := check(d); msg != "" {
		t.errorf(key, "%s", msg)
		return o
	}
	o.v, o.bad = d, false
	return o
}

// integer reads an integer in [lo, hi] at key; why explains the bounds.
func (t table) integer(key string, lo, hi int64, why string) opt[int] {
	v, ok := t.m[key]
	if !ok {
		return opt[int]{}
	}
	o := opt[int]{set: true, bad: true}
	n, ok := v.(int64)
	switch {
	case !ok:
		t.errorf(key, "must be an integer, not %s", tomlType(v))
	case n < lo || n > hi:
		t.errorf(key, "%d is out of range: want %d to %d (%s)", n, lo, hi, why)
	default:
		o.v, o.bad = int(n), false
	}
	return o
}

// tomlType names the TOML type of a decoded value, for error messages.
func tomlType(v any) string {
	switch v := v.(type) {
	case string:
		if len(v) > 64 {
			v = v[:61] + "..."
		}
		return fmt.Sprintf("the string %q", v)
	case int64:
		return fmt.Sprintf("the integer %d", v)
	case float64:
		return fmt.Sprintf("the float %v", v)
	case bool:
		return fmt.Sprintf("the boolean %v", v)
	case time.Time:
		return "a date-time"
	case map[string]any:
		return "a table"
	case []map[string]any:
		return "an array of tables"
	case []any:
		return "an array"
	}
	return fmt.Sprintf("a %T", v)
}
