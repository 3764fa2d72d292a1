package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
)

// The hostile files of issue 16: 20,000 nested keys took the decoder 24 s
// and 5 GB (40 KB of "a.a.a..."). Each nesting form is now refused before
// decoding, in milliseconds, with the line and the start of the key.
func TestBoundsRefuseDeepNesting(t *testing.T) {
	const n = 20_000
	for name, src := range map[string]string{
		"dotted key":    strings.Repeat("a.", n) + "a = 1\n",
		"table header":  "[" + strings.Repeat("a.", n) + "a]\n",
		"inline tables": "a = " + strings.Repeat("{a = ", n) + "1" + strings.Repeat("}", n) + "\n",
		"arrays":        "a = " + strings.Repeat("[", n) + strings.Repeat("]", n) + "\n",
		"in a task":     minimal + "[task.params]\n" + strings.Repeat("p.", n) + "q = 1\n",
	} {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			_, err := Parse([]byte(src), "deep.toml", nil, testPlugins)
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("took %v to refuse", d)
			}
			if err == nil || !strings.Contains(err.Error(), "deep.toml: line ") ||
				!strings.Contains(err.Error(), "nested deeper than 16 levels") {
				t.Errorf("err = %v; want the nesting limit, with file and line", err)
			}
		})
	}
}

// Depth 16 is allowed and 17 is not, however the levels are written; text
// inside strings and comments does not count.
func TestBoundsDepthLimit(t *testing.T) {
	key := func(n int) string { // a dotted key of n parts
		parts := make([]string, n)
		for i := range parts {
			parts[i] = fmt.Sprintf("k%d", i)
		}
		return strings.Join(parts, ".")
	}
	for _, tc := range []struct {
		name  string
		src   string
		depth int // as decoded
	}{
		{"dotted", key(16) + " = 1", 16},
		{"header and dotted", "[" + key(10) + "]\n" + key(6) + " = 1", 16},
		{"array of tables and inline", "[[" + key(4) + "]]\nx = {" + key(10) + " = 1, b = 2}", 15},
		{"arrays", "a = " + strings.Repeat("[", 15) + strings.Repeat("]", 15), 16},
		{"arrays with elements", "a = [1, [2, [3, [4, [5, [6, [7, [8, [9, [10, [11, [12, [13, [14, [15]]]]]]]]]]]]]]]", 16},
		{"inline tables", "a = " + strings.Repeat("{b = ", 15) + "1" + strings.Repeat("}", 15), 16},
		{"multi-line array", "a = [\n  [1, 2], # [[[[[[[[[[[[[[[[[[[[\n  [3],\n]\n" + key(16) + " = 1", 16},
		{"quoted keys", `"a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.r" = 1` + "\n'x.y'.\"z\" = 2", 2},
		{"brackets in strings", `a = ["[[[[[[[[[[[[[[[[[[[[", '{{{{{{{{{{{{{{{{{{{{', """[[[[[[[[[[[[[[[[[[[[[[""", '''.[.[.[.[.[.[.[.[.[.[.[.[.[.[.[.[.[.[''']`, 2},
		{"escaped quotes", `a = "\"[[[[[[[[[[[[[[[[[[[[[[[[" # "` + "\n" + `b = """x\""" [[[[[[[[[[[[[[[[[[[[[ """`, 1},
		{"comment", "# " + key(40) + "\n[a] # [" + key(40) + "]\nb = 1", 2},
		{"empty inline tables", "a = {}\nb = {c = {}, d = [{}, {}]}\n" + key(16) + " = 1", 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m map[string]any
			if _, err := toml.Decode(tc.src, &m); err != nil {
				t.Fatalf("not TOML: %v", err)
			}
			if d := treeDepth(m); d != tc.depth {
				t.Fatalf("decoded depth %d, want %d", d, tc.depth)
			}
			if err := checkBounds([]byte(tc.src)); err != nil {
				t.Errorf("depth %d refused: %v", tc.depth, err)
			}
			if tc.depth < MaxDepth {
				return
			}
			// One more level of the same kind is refused.
			deeper := strings.Replace(tc.src, "k0", "k0.x", 1)
			switch {
			case strings.HasPrefix(tc.name, "arrays"):
				deeper = strings.Replace(tc.src, "[", "[[", 1) + "]"
			case tc.name == "inline tables":
				deeper = "a = {z = " + tc.src[len("a = "):] + "}"
			}
			if err := checkBounds([]byte(deeper)); err == nil || !strings.Contains(err.Error(), "nested deeper than 16") {
				t.Errorf("depth 17 (%.60q...) = %v; want refused", deeper, err)
			}
		})
	}
}

// More than MaxKeys keys are refused before decoding; the parts of a dotted
// key, headers, arrays and inline tables count.
func TestBoundsKeyLimit(t *testing.T) {
	var b strings.Builder
	for i := range MaxKeys {
		fmt.Fprintf(&b, "k%d = 1\n", i)
	}
	if err := checkBounds([]byte(b.String())); err != nil {
		t.Errorf("%d keys refused: %v", MaxKeys, err)
	}
	for name, extra := range map[string]string{
		"one more key":    "x = 1\n",
		"a header":        "[t]\n",
		"an inline table": "",
	} {
		src := b.String() + extra
		if name == "an inline table" {
			src = strings.Replace(src, "k0 = 1", "k0 = {}", 1)
		}
		err := checkBounds([]byte(src))
		if err == nil || !strings.Contains(err.Error(), "more than 500000 keys") {
			t.Errorf("%s past the limit: %v", name, err)
		}
	}
}

// Load reads at most MaxFileSize bytes: a file one byte too large is
// refused at once, naming the limit; /dev/zero (which never ends) and a
// directory are not regular files, refused before a byte is read. Before,
// `run -config /dev/zero` never returned.
func TestLoadBoundsFileSize(t *testing.T) {
	big := filepath.Join(t.TempDir(), "big.toml")
	data := []byte(strings.Repeat("#", MaxFileSize) + "\n")
	if err := os.WriteFile(big, data, 0o644); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{"/dev/zero": "not a regular file", big: "16 MiB", t.TempDir(): "not a regular file"} {
		start := time.Now()
		_, err := Load(path, nil, testPlugins)
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s: took %v", path, d)
		}
		if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), want) {
			t.Errorf("Load(%s) = %v; want %q, naming the file", path, err, want)
		}
	}
	// Exactly the limit is read (a file of comments is a valid, empty
	// configuration).
	if err := os.WriteFile(big, data[1:], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(big, nil, testPlugins); err != nil {
		t.Errorf("a file of exactly %d bytes: %v", MaxFileSize, err)
	}
}

// treeDepth is the nesting depth of a decoded TOML value, as checkBounds
// counts it (an array of tables adds no level of its own).
func treeDepth(v any) int {
	d := 0
	switch v := v.(type) {
	case map[string]any:
		for _, e := range v {
			d = max(d, 1+treeDepth(e))
		}
	case []map[string]any:
		for _, e := range v {
			d = max(d, treeDepth(e))
		}
	case []any:
		d = 1
		for _, e := range v {
			d = max(d, 1+treeDepth(e))
		}
	}
	return d
}
