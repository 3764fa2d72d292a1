package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ---- a YAML reader for the subset the deployment files keep to ----

// parseYAML reads the YAML subset the deployment files are written in
// (there is no YAML library in go.mod; see parseAlertRules): documents
// separated by "---"; block mappings and "- " lists indented with spaces (a
// list may sit at its key's indentation, as Kubernetes writes them); values
// plain, "double-quoted" or 'single-quoted' on one line, one-line flow
// lists of scalars ["a", b], {} and []; `|` and `|-` block scalars; comments
// on lines of their own or after a value. Scalars stay strings; an absent
// value is nil. Anything else — tabs, anchors, aliases, tags, folded or
// multi-line plain scalars, nested flow collections — is an error rather
// than misread.
func parseYAML(text string) ([]any, error) {
	var docs []any
	var cur []yamlLine
	flush := func() error {
		r := &yamlReader{lines: cur}
		cur = nil
		r.skip()
		if r.i == len(r.lines) {
			return nil
		}
		if r.lines[r.i].indent != 0 {
			return r.errorf("the document does not start at column 1")
		}
		v, err := r.block(0)
		if err != nil {
			return err
		}
		if r.skip(); r.i < len(r.lines) {
			return r.errorf("unexpected indentation")
		}
		docs = append(docs, v)
		return nil
	}
	for n, raw := range strings.Split(text, "\n") {
		raw = strings.TrimRight(raw, " \r")
		switch {
		case raw == "---":
			if err := flush(); err != nil {
				return nil, err
			}
			continue
		case raw == "..." || strings.HasPrefix(raw, "%"):
			return nil, fmt.Errorf("line %d: directives and document ends are not supported", n+1)
		}
		body := strings.TrimLeft(raw, " ")
		if strings.HasPrefix(body, "\t") {
			return nil, fmt.Errorf("line %d: a tab in the indentation", n+1)
		}
		cur = append(cur, yamlLine{n: n + 1, indent: len(raw) - len(body), text: body, raw: raw})
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return docs, nil
}

type yamlLine struct {
	n      int // 1-based
	indent int
	text   string // without the indentation
	raw    string
}

func (l yamlLine) blank() bool { return l.text == "" || l.text[0] == '#' }

type yamlReader struct {
	lines []yamlLine
	i     int
}

func (r *yamlReader) errorf(format string, args ...any) error {
	n := 0
	if r.i < len(r.lines) {
		n = r.lines[r.i].n
	} else if len(r.lines) > 0 {
		n = r.lines[len(r.lines)-1].n
	}
	return fmt.Errorf("line %d: %s", n, fmt.Sprintf(format, args...))
}

// skip moves past blank and comment lines.
func (r *yamlReader) skip() {
	for r.i < len(r.lines) && r.lines[r.i].blank() {
		r.i++
	}
}

func isItem(text string) bool { return text == "-" || strings.HasPrefix(text, "- ") }

// block reads the node whose first line, r.i, is at indent.
func (r *yamlReader) block(indent int) (any, error) {
	l := r.lines[r.i]
	if isItem(l.text) {
		return r.list(indent)
	}
	if _, _, ok, err := splitKey(l.text); err != nil {
		return nil, r.errorf("%v", err)
	} else if ok {
		return r.mapping(indent)
	}
	v, err := yamlScalar(l.text)
	if err != nil {
		return nil, r.errorf("%v", err)
	}
	r.i++
	if r.skip(); r.i < len(r.lines) && r.lines[r.i].indent > indent {
		return nil, r.errorf("a multi-line plain scalar, or a value where a key was expected")
	}
	return v, nil
}

func (r *yamlReader) list(indent int) (any, error) {
	out := []any{}
	for {
		r.skip()
		if r.i == len(r.lines) || r.lines[r.i].indent != indent || !isItem(r.lines[r.i].text) {
			return out, nil
		}
		l := r.lines[r.i]
		rest := strings.TrimLeft(l.text[1:], " ")
		if rest == "" || rest[0] == '#' {
			r.i++
			r.skip()
			if r.i == len(r.lines) || r.lines[r.i].indent <= indent {
				out = append(out, nil)
				continue
			}
			v, err := r.block(r.lines[r.i].indent)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
			continue
		}
		// "- key: value" opens a mapping at the column of "key".
		r.lines[r.i].indent += len(l.text) - len(rest)
		r.lines[r.i].text = rest
		v, err := r.block(r.lines[r.i].indent)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
}

func (r *yamlReader) mapping(indent int) (any, error) {
	out := map[string]any{}
	for {
		r.skip()
		if r.i == len(r.lines) || r.lines[r.i].indent < indent {
			return out, nil
		}
		l := r.lines[r.i]
		if l.indent > indent {
			return nil, r.errorf("unexpected indentation")
		}
		if isItem(l.text) {
			return nil, r.errorf("a list item where a key was expected")
		}
		key, rest, ok, err := splitKey(l.text)
		if err != nil || !ok {
			return nil, r.errorf("want key: value, got %q (%v)", l.text, err)
		}
		if _, dup := out[key]; dup {
			return nil, r.errorf("key %q twice", key)
		}
		r.i++
		var v any
		switch {
		case rest == "" || rest[0] == '#':
			r.skip()
			if r.i < len(r.lines) {
				next := r.lines[r.i]
				if next.indent > indent || next.indent == indent && isItem(next.text) {
					if v, err = r.block(next.indent); err != nil {
						return nil, err
					}
				}
			}
		case rest == "|" || rest == "|-":
			v = r.blockScalar(indent, rest == "|-")
		case rest[0] == '|' || rest[0] == '>':
			return nil, fmt.Errorf("line %d: block scalar %q: only | and |- are supported", l.n, rest)
		default:
			if v, err = yamlScalar(rest); err != nil {
				return nil, fmt.Errorf("line %d: %s: %v", l.n, key, err)
			}
		}
		out[key] = v
	}
}

// blockScalar reads the lines of a `|` scalar under a key at indent.
func (r *yamlReader) blockScalar(indent int, strip bool) string {
	var lines []string
	content := -1
	for r.i < len(r.lines) {
		l := r.lines[r.i]
		if l.text == "" {
			lines = append(lines, "")
			r.i++
			continue
		}
		if l.indent <= indent {
			break
		}
		if content < 0 {
			content = l.indent
		}
		if l.indent < content {
			break // less indented than the first line: the scalar has ended
		}
		lines = append(lines, l.raw[content:])
		r.i++
	}
	for len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	s := strings.Join(lines, "\n")
	if !strip && s != "" {
		s += "\n"
	}
	return s
}

// splitKey splits "key: rest" (the key plain or quoted); ok is false when
// text is not a key.
func splitKey(text string) (key, rest string, ok bool, err error) {
	if text[0] == '"' || text[0] == '\'' {
		q, after, err := quoted(text)
		if err != nil {
			return "", "", false, err
		}
		if after == ":" || strings.HasPrefix(after, ": ") {
			return q, strings.TrimSpace(after[1:]), true, nil
		}
		return "", "", false, nil
	}
	if strings.ContainsRune("[{&*!|>%@`", rune(text[0])) {
		return "", "", false, nil
	}
	if i := strings.Index(text, ": "); i > 0 && !strings.Contains(text[:i], " #") {
		return text[:i], strings.TrimSpace(text[i+2:]), true, nil
	}
	if strings.HasSuffix(text, ":") && !strings.Contains(text, " #") {
		return text[:len(text)-1], "", true, nil
	}
	return "", "", false, nil
}

// quoted reads the quoted scalar at the start of s and returns what follows it.
func quoted(s string) (string, string, error) {
	q := s[0]
	for i := 1; i < len(s); i++ {
		switch {
		case q == '"' && s[i] == '\\':
			i++
		case s[i] == q && q == '\'' && i+1 < len(s) && s[i+1] == '\'':
			i++
		case s[i] == q:
			body, after := s[:i+1], strings.TrimLeft(s[i+1:], " ")
			if q == '\'' {
				return strings.ReplaceAll(body[1:len(body)-1], "''", "'"), after, nil
			}
			v, err := strconv.Unquote(body)
			if err != nil {
				return "", "", fmt.Errorf("%s: %v", body, err)
			}
			return v, after, nil
		}
	}
	return "", "", fmt.Errorf("unterminated string %s", s)
}

// yamlScalar reads a one-line value.
func yamlScalar(s string) (any, error) {
	switch {
	case s == "{}":
		return map[string]any{}, nil
	case s[0] == '"' || s[0] == '\'':
		v, after, err := quoted(s)
		if err != nil {
			return nil, err
		}
		if after != "" && after[0] != '#' {
			return nil, fmt.Errorf("text after a quoted string: %q", after)
		}
		return v, nil
	case s[0] == '[':
		end := strings.LastIndexByte(s, ']')
		if end < 0 {
			return nil, fmt.Errorf("unterminated flow list %s", s)
		}
		if after := strings.TrimSpace(s[end+1:]); after != "" && after[0] != '#' {
			return nil, fmt.Errorf("text after a flow list: %q", after)
		}
		out := []any{}
		body := strings.TrimSpace(s[1:end])
		for body != "" {
			var item string
			if body[0] == '"' || body[0] == '\'' {
				v, after, err := quoted(body)
				if err != nil {
					return nil, err
				}
				item, body = v, after
			} else {
				if strings.ContainsRune("[{&*!", rune(body[0])) {
					return nil, fmt.Errorf("nested or tagged flow item in %s", s)
				}
				j := strings.IndexByte(body, ',')
				if j < 0 {
					j = len(body)
				}
				item, body = strings.TrimSpace(body[:j]), body[j:]
			}
			out = append(out, item)
			body = strings.TrimSpace(body)
			if body != "" {
				if body[0] != ',' {
					return nil, fmt.Errorf("want , between flow items in %s", s)
				}
				body = strings.TrimSpace(body[1:])
			}
		}
		return out, nil
	case strings.ContainsRune("{&*!%@`|>", rune(s[0])):
		return nil, fmt.Errorf("unsupported YAML: %q", s)
	}
	if i := strings.Index(s, " #"); i >= 0 {
		s = strings.TrimSpace(s[:i])
	}
	return s, nil
}

func TestParseYAML(t *testing.T) {
	t.Parallel()
	docs, err := parseYAML(`# c
a: 1
b:
  c: "x: \"y\"" # comment
  d: 'it''s'
list:
- one
- k: v
  k2: [a, "b c", 'd']
  nested:
    - x
-
  - inner
empty:
e: {}
f: []
block: |
  line 1

    indented # not a comment
tail: |-
  no newline
---
second: doc
`)
	if err != nil {
		t.Fatal(err)
	}
	want := []any{
		map[string]any{
			"a": "1",
			"b": map[string]any{"c": `x: "y"`, "d": "it's"},
			"list": []any{"one",
				map[string]any{"k": "v", "k2": []any{"a", "b c", "d"}, "nested": []any{"x"}},
				[]any{"inner"}},
			"empty": nil,
			"e":     map[string]any{},
			"f":     []any{},
			"block": "line 1\n\n  indented # not a comment\n",
			"tail":  "no newline",
		},
		map[string]any{"second": "doc"},
	}
	if !reflect.DeepEqual(docs, want) {
		t.Errorf("got  %#v\nwant %#v", docs, want)
	}
	for _, bad := range []string{
		"a:\n\tb: 1\n", "a: &x 1\n", "a: *x\n", "a: !!str 1\n", "a: >\n  folded\n", "a: [[1]]\n",
		"a: 1\na: 2\n", "a:\n  b: 1\n c: 2\n", "a: plain\n  continued\n", "a: \"open\n", "- a\nb: 1\n",
	} {
		if _, err := parseYAML(bad); err == nil {
			t.Errorf("no error for %q", bad)
		}
	}
}

// ydoc is one parsed YAML document; its getters report a missing path or
// a wrong type as a test error naming the file and the path.
type ydoc struct {
	t    *testing.T
	file string
	v    any
}

// get follows path: string keys in mappings, int indexes in lists.
func (d ydoc) get(path ...any) (any, bool) {
	v := d.v
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil, false
			}
			if v, ok = m[k]; !ok {
				return nil, false
			}
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				return nil, false
			}
			v = l[k]
		}
	}
	return v, true
}

func (d ydoc) at(path ...any) ydoc {
	v, _ := d.get(path...)
	return ydoc{d.t, d.file, v}
}

func (d ydoc) where(path []any) string {
	var b strings.Builder
	for _, p := range path {
		fmt.Fprintf(&b, ".%v", p)
	}
	return d.file + ": " + strings.TrimPrefix(b.String(), ".")
}

func (d ydoc) str(path ...any) string {
	d.t.Helper()
	v, ok := d.get(path...)
	s, isStr := v.(string)
	if !ok || !isStr {
		d.t.Errorf("%s: want a string, have %#v", d.where(path), v)
	}
	return s
}

func (d ydoc) list(path ...any) []any {
	d.t.Helper()
	v, ok := d.get(path...)
	l, isList := v.([]any)
	if !ok || !isList {
		d.t.Errorf("%s: want a list, have %#v", d.where(path), v)
	}
	return l
}

func (d ydoc) strs(path ...any) []string {
	d.t.Helper()
	var out []string
	for i, v := range d.list(path...) {
		s, ok := v.(string)
		if !ok {
			d.t.Errorf("%s.%d: want a string, have %#v", d.where(path), i, v)
		}
		out = append(out, s)
	}
	return out
}

func (d ydoc) duration(path ...any) time.Duration {
	d.t.Helper()
	s := d.str(path...)
	v, err := time.ParseDuration(s)
	if err != nil {
		d.t.Errorf("%s: %v", d.where(path), err)
	}
	return v
}

func loadYAML(t *testing.T, path string) []ydoc {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	docs, err := parseYAML(string(b))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []ydoc
	for _, v := range docs {
		out = append(out, ydoc{t, filepath.Base(path), v})
	}
	return out
}

func loadYAMLDoc(t *testing.T, path string) ydoc {
	t.Helper()
	docs := loadYAML(t, path)
	if len(docs) != 1 {
		t.Fatalf("%s: %d documents, want 1", path, len(docs))
	}
	return docs[0]
}
