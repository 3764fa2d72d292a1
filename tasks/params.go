package tasks

import (
	"encoding"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// Decode fills the struct that dst points to from a task's params table,
// using the fields' `toml` tags. It is strict, because a misspelt key would
// otherwise be ignored and the task would silently run with a default:
// a key that names no field (compared case-sensitively, unlike plain
// BurntSushi/toml) is an error, and so is a value of the wrong type.
// Errors name the parameter, and for a wrong type also the value. They do
// not start with "tasks:", so that a plugin wraps them with its own name:
//
//	if err := tasks.Decode(params, &p); err != nil {
//		return nil, fmt.Errorf("greet: %w", err)
//	}
//
// Every bad key is reported: the error joins one error per key
// (errors.Join), in key order, so that an operator can fix them all at
// once. Fields whose keys are absent or bad keep their values, so set
// defaults in dst before calling Decode. params may be nil. After an
// error, dst may be partly filled.
func Decode(params map[string]any, dst any) error {
	rv := reflect.ValueOf(dst)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return fmt.Errorf("tasks.Decode: dst must be a non-nil pointer, not %T", dst)
	}

	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	sort.Strings(keys) // report the same error for the same table every time

	// One key at a time, so that an error is pinned to the key that caused
	// it: BurntSushi/toml's type errors carry the key only in their text.
	var errs []error
	for _, k := range keys {
		if err := decodeKey(rv, k, params[k], dst); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// decodeKey decodes the parameter k, whose value is v, into dst.
func decodeKey(rv reflect.Value, k string, v, dst any) error {
	doc, err := toml.Marshal(map[string]any{k: v})
	if err != nil {
		return fmt.Errorf("parameter %q: %s", k, tomlMessage(err))
	}
	md, err := toml.Decode(string(doc), dst)
	if err != nil {
		msg := tomlMessage(err)
		var pe toml.ParseError
		if !errors.As(err, &pe) {
			// A type mismatch; its message names types, not the value.
			msg += " (value " + formatValue(v) + ")"
		}
		return fmt.Errorf("parameter %q: %s", k, msg)
	}
	if !md.IsDefined(k) {
		// The encoder drops nil values rather than failing on them.
		return fmt.Errorf("parameter %q: unsupported value %s", k, formatValue(v))
	}
	if u := md.Undecoded(); len(u) > 0 {
		return fmt.Errorf("unknown parameter %q", keyName(u[0]))
	}
	for _, key := range md.Keys() {
		t, ok := destType(rv.Type(), key)
		if !ok {
			return fmt.Errorf("unknown parameter %q", keyName(key))
		}
		// BurntSushi/toml leaves a map alone when given a non-table.
		if t != nil && t.Kind() == reflect.Map && md.Type(key...) != "Hash" {
			if len(key) == 1 {
				return fmt.Errorf("parameter %q: want a table (value %s)", k, formatValue(v))
			}
			return fmt.Errorf("parameter %q: want a table", keyName(key))
		}
	}
	return nil
}

// tomlMessage strips the position that BurntSushi/toml puts in its errors:
// it points into the document Decode made up, not the user's file.
func tomlMessage(err error) string {
	var pe toml.ParseError
	if errors.As(err, &pe) {
		return pe.Message
	}
	msg := err.Error()
	if strings.HasPrefix(msg, "toml: ") {
		if _, rest, ok := strings.Cut(msg, "): "); ok {
			return rest
		}
		return strings.TrimPrefix(msg, "toml: ")
	}
	return msg
}

// formatValue renders a parameter value for an error message, bounded so
// that a large table cannot flood the log.
func formatValue(v any) string {
	const max = 100
	s, quote := fmt.Sprint(v), false
	if str, ok := v.(string); ok {
		s, quote = str, true
	}
	cut := len(s) > max
	if cut {
		s = strings.ToValidUTF8(s[:max], "")
	}
	if quote {
		s = strconv.Quote(s)
	}
	if cut {
		s += "..."
	}
	return s
}

// keyName spells a key path as the user would, without TOML's quoting.
func keyName(key toml.Key) string { return strings.Join(key, ".") }

var (
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
	tomlUnmarshalerType = reflect.TypeFor[toml.Unmarshaler]()
)

// destType returns the Go type that key, a path into the decoded document,
// is decoded into, or nil below a type that takes any key (a custom decoder,
// an interface). ok is false if a struct on the way has no field spelt
// exactly like the key: BurntSushi/toml falls back to a case-insensitive
// match, which would let "Command" and "command" both set one field.
func destType(t reflect.Type, key toml.Key) (_ reflect.Type, ok bool) {
	for _, k := range key {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
			t = t.Elem() // arrays of tables name their elements' keys
		}
		switch pt := reflect.PointerTo(t); {
		case pt.Implements(textUnmarshalerType), pt.Implements(tomlUnmarshalerType):
			return nil, true
		case t.Kind() == reflect.Map:
			t = t.Elem()
		case t.Kind() == reflect.Struct:
			if t, ok = tomlField(t, k); !ok {
				return nil, false
			}
		default:
			return nil, true
		}
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t, true
}

// tomlField returns the type of the field of struct type t named k by its
// `toml` tag or, untagged, by its Go name. Like BurntSushi/toml, it looks
// into untagged embedded structs.
func tomlField(t reflect.Type, k string) (reflect.Type, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		if tag == "-" {
			continue
		}
		if tag == "" && f.Anonymous {
			et := f.Type
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct {
				if ft, ok := tomlField(et, k); ok {
					return ft, true
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		name := tag
		if name == "" {
			name = f.Name
		}
		if name == k {
			return f.Type, true
		}
	}
	return nil, false
}

// Duration is a time.Duration that decodes from a Go duration string such
// as "30s" or "1m30s". Negative durations are rejected; a plugin that needs
// a positive one checks for zero itself.
type Duration struct {
	time.Duration
}

// UnmarshalText parses a Go duration string.
func (d *Duration) UnmarshalText(text []byte) error {
	s := string(text)
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("bad duration %q (want e.g. \"30s\" or \"1m30s\")", s)
	}
	if v < 0 {
		return fmt.Errorf("negative duration %q", s)
	}
	d.Duration = v
	return nil
}

// MarshalText formats d like time.Duration.String, so that a Duration put
// into a params table decodes back to itself.
func (d Duration) MarshalText() ([]byte, error) {
	return []byte(d.String()), nil
}
