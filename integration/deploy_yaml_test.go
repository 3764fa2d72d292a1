package integration

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// parseYAML reads a YAML stream with gopkg.in/yaml.v3 into the plain values
// the deploy tests walk: map[string]any, []any, nil for null, and every
// other scalar as the text the file writes, quotes removed — so 3, "3" and
// '3' all read "3", true and "true" both "true", and the checks compare
// text, as they did with the reader this replaced (they do not tell a
// quoted number from a number). Aliases are resolved; a key written twice
// in one mapping (which YAML forbids), a merge key (<<) and a key that is
// not a scalar are errors. Empty documents are left out.
func parseYAML(text string) ([]any, error) {
	dec := yaml.NewDecoder(strings.NewReader(text))
	var docs []any
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		if len(doc.Content) == 0 {
			continue
		}
		root := doc.Content[0]
		if root.Kind == yaml.ScalarNode && root.Tag == "!!null" && root.Value == "" {
			continue // "---" with nothing after it
		}
		v, err := plainYAML(root)
		if err != nil {
			return nil, err
		}
		docs = append(docs, v)
	}
}

// plainYAML converts one node; see parseYAML.
func plainYAML(n *yaml.Node) (any, error) {
	switch n.Kind {
	case yaml.AliasNode:
		return plainYAML(n.Alias)
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return nil, nil
		}
		return n.Value, nil
	case yaml.SequenceNode:
		out := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			v, err := plainYAML(c)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	case yaml.MappingNode:
		out := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, val := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("line %d: a key that is not a scalar", k.Line)
			}
			if k.Tag == "!!merge" {
				return nil, fmt.Errorf("line %d: merge keys (<<) are not read", k.Line)
			}
			if _, dup := out[k.Value]; dup {
				return nil, fmt.Errorf("line %d: key %q twice", k.Line, k.Value)
			}
			v, err := plainYAML(val)
			if err != nil {
				return nil, err
			}
			out[k.Value] = v
		}
		return out, nil
	}
	return nil, fmt.Errorf("line %d: unexpected YAML node kind %v", n.Line, n.Kind)
}

// The conversion keeps the text of scalars and resolves what the library
// reads; the library's errors, and keys written twice, are errors.
func TestParseYAML(t *testing.T) {
	t.Parallel()
	docs, err := parseYAML(`# c
a: 1
b:
  c: "x: \"y\"" # comment
  d: 'it''s'
  n: null
  t: true
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
anchored: &x {p: [1, {q: r}]}
alias: *x
folded: >
  one
  two
plain: multi
  line
tagged: !!str 3
---
---
second: doc
`)
	if err != nil {
		t.Fatal(err)
	}
	anchored := map[string]any{"p": []any{"1", map[string]any{"q": "r"}}}
	want := []any{
		map[string]any{
			"a": "1",
			"b": map[string]any{"c": `x: "y"`, "d": "it's", "n": nil, "t": "true"},
			"list": []any{"one",
				map[string]any{"k": "v", "k2": []any{"a", "b c", "d"}, "nested": []any{"x"}},
				[]any{"inner"}},
			"empty":    nil,
			"e":        map[string]any{},
			"f":        []any{},
			"block":    "line 1\n\n  indented # not a comment\n",
			"tail":     "no newline",
			"anchored": anchored,
			"alias":    anchored,
			"folded":   "one two\n",
			"plain":    "multi line",
			"tagged":   "3",
		},
		map[string]any{"second": "doc"},
	}
	if !reflect.DeepEqual(docs, want) {
		t.Errorf("got  %#v\nwant %#v", docs, want)
	}
	for _, bad := range []string{
		"a:\n\tb: 1\n", "a: *x\n", "a: 1\na: 2\n", "a:\n  b: 1\n c: 2\n", "a: \"open\n", "- a\nb: 1\n",
		"base: &b {x: 1}\nc:\n  <<: *b\n", "? [k]\n: v\n",
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
