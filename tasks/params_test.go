package tasks

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

type testParams struct {
	Name    string            `toml:"name"`
	Count   int               `toml:"count"`
	Args    []string          `toml:"args"`
	Env     map[string]string `toml:"env"`
	Wait    Duration          `toml:"wait"`
	Ignored string            `toml:"-"`
	Inner   struct {
		Level int               `toml:"level"`
		Tags  map[string]string `toml:"tags"`
	} `toml:"inner"`
	Embedded
}

type Embedded struct {
	Flag bool `toml:"flag"`
}

func TestDecode(t *testing.T) {
	tests := []struct {
		name    string
		params  map[string]any
		want    func(*testing.T, testParams)
		wantErr []string // substrings of the error; nil means success
	}{
		{name: "nil map", params: nil, want: func(t *testing.T, p testParams) {
			if p.Name != "default" || p.Wait.Duration != time.Minute {
				t.Errorf("defaults lost: %+v", p)
			}
		}},
		{name: "all kinds", params: map[string]any{
			"name": "x", "count": int64(3), "args": []any{"a", "b"},
			"env": map[string]any{"K": "v"}, "wait": "90s", "flag": true,
			"inner": map[string]any{"level": int64(2)},
		}, want: func(t *testing.T, p testParams) {
			if p.Name != "x" || p.Count != 3 || strings.Join(p.Args, ",") != "a,b" ||
				p.Env["K"] != "v" || p.Wait.Duration != 90*time.Second || !p.Flag || p.Inner.Level != 2 {
				t.Errorf("got %+v", p)
			}
		}},
		{name: "go ints and slices", params: map[string]any{"count": 7, "args": []string{"z"}},
			want: func(t *testing.T, p testParams) {
				if p.Count != 7 || len(p.Args) != 1 {
					t.Errorf("got %+v", p)
				}
			}},
		{name: "unknown key", params: map[string]any{"nmae": "x"}, wantErr: []string{`unknown parameter "nmae"`}},
		{name: "unknown nested key", params: map[string]any{"inner": map[string]any{"levle": int64(1)}},
			wantErr: []string{`unknown parameter "inner.levle"`}},
		{name: "case differs", params: map[string]any{"Name": "x"}, wantErr: []string{`unknown parameter "Name"`}},
		{name: "case differs nested", params: map[string]any{"inner": map[string]any{"Level": int64(1)}},
			wantErr: []string{`unknown parameter "inner.Level"`}},
		{name: "skipped field", params: map[string]any{"Ignored": "x"}, wantErr: []string{`unknown parameter "Ignored"`}},
		{name: "string for int", params: map[string]any{"count": "many"}, wantErr: []string{`parameter "count"`, `"many"`}},
		{name: "int for array", params: map[string]any{"args": int64(1)}, wantErr: []string{`parameter "args"`, "value 1"}},
		{name: "string for array", params: map[string]any{"args": "ls -l"}, wantErr: []string{`parameter "args"`, `"ls -l"`}},
		{name: "mixed array", params: map[string]any{"args": []any{"a", int64(1)}}, wantErr: []string{`parameter "args"`, "[a 1]"}},
		{name: "table in array", params: map[string]any{"args": []any{map[string]any{"a": int64(1)}}}, wantErr: []string{`parameter "args"`}},
		{name: "array of tables", params: map[string]any{"args": []map[string]any{{"a": int64(1)}}}, wantErr: []string{`parameter "args"`}},
		{name: "table for string", params: map[string]any{"name": map[string]any{"a": []any{}}}, wantErr: []string{`parameter "name"`}},
		{name: "int for table", params: map[string]any{"env": int64(1)}, wantErr: []string{`parameter "env"`}},
		{name: "string for nested table", params: map[string]any{"inner": map[string]any{"tags": "x"}}, wantErr: []string{`parameter "inner.tags": want a table`}},
		{name: "env value not string", params: map[string]any{"env": map[string]any{"K": int64(1)}}, wantErr: []string{`parameter "env"`}},
		{name: "float for int", params: map[string]any{"count": 1.5}, wantErr: []string{`parameter "count"`}},
		{name: "int overflow", params: map[string]any{"count": uint64(math.MaxUint64)}, wantErr: []string{`parameter "count"`}},
		{name: "bad duration", params: map[string]any{"wait": "5x"}, wantErr: []string{`parameter "wait"`, `"5x"`}},
		{name: "negative duration", params: map[string]any{"wait": "-1s"}, wantErr: []string{`parameter "wait"`, `negative`, `"-1s"`}},
		{name: "duration as number", params: map[string]any{"wait": int64(5)}, wantErr: []string{`parameter "wait"`, `"5"`}},
		{name: "duration as table", params: map[string]any{"wait": map[string]any{}}, wantErr: []string{`parameter "wait"`}},
		{name: "nil value", params: map[string]any{"name": nil}, wantErr: []string{`parameter "name"`}},
		{name: "nil in array", params: map[string]any{"args": []any{nil}}, wantErr: []string{`parameter "args"`}},
		{name: "channel", params: map[string]any{"name": make(chan int)}, wantErr: []string{`parameter "name"`}},
		{name: "func", params: map[string]any{"name": func() {}}, wantErr: []string{`parameter "name"`}},
		{name: "non-string map keys", params: map[string]any{"env": map[int]any{1: 2}}, wantErr: []string{`parameter "env"`}},
		{name: "invalid utf-8", params: map[string]any{"name": "\xff\xfe"}, wantErr: []string{`parameter "name"`}},
		{name: "odd key", params: map[string]any{"a.b \"c\"\n": int64(1)}, wantErr: []string{`unknown parameter`}},
		{name: "empty key", params: map[string]any{"": int64(1)}, wantErr: []string{`unknown parameter ""`}},
		{name: "huge value is cut", params: map[string]any{"count": strings.Repeat("x", 10000)},
			wantErr: []string{`parameter "count"`, `xx"...)`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := testParams{Name: "default", Wait: Duration{time.Minute}}
			err := Decode(tt.params, &p)
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("Decode: %v", err)
				}
				tt.want(t, p)
				return
			}
			if err == nil {
				t.Fatalf("Decode succeeded: %+v", p)
			}
			for _, s := range tt.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
			if len(err.Error()) > 400 {
				t.Errorf("error is %d bytes long: %q", len(err.Error()), err)
			}
			if strings.Contains(err.Error(), "line 1") {
				t.Errorf("error %q points into Decode's own document", err)
			}
		})
	}
}

func TestDecodeBadDestination(t *testing.T) {
	var p testParams
	for _, dst := range []any{nil, p, (*testParams)(nil)} {
		if err := Decode(map[string]any{"name": "x"}, dst); err == nil {
			t.Errorf("Decode into %T succeeded", dst)
		}
	}
}

func TestDuration(t *testing.T) {
	tests := []struct {
		in      string
		want    time.Duration
		wantErr string
	}{
		{in: "5s", want: 5 * time.Second},
		{in: "1m30s", want: 90 * time.Second},
		{in: "0", want: 0},
		{in: "", wantErr: `bad duration ""`},
		{in: "5", wantErr: `bad duration "5"`},
		{in: "soon", wantErr: `bad duration "soon"`},
		{in: "-5s", wantErr: `negative duration "-5s"`},
		{in: "99999999999h", wantErr: `bad duration "99999999999h"`},
	}
	for _, tt := range tests {
		var d Duration
		err := d.UnmarshalText([]byte(tt.in))
		switch {
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("UnmarshalText(%q) = %v, want error containing %q", tt.in, err, tt.wantErr)
		case tt.wantErr == "" && (err != nil || d.Duration != tt.want):
			t.Errorf("UnmarshalText(%q) = %v, %v; want %v", tt.in, d, err, tt.want)
		}
	}
}

func TestDurationRoundTrip(t *testing.T) {
	var p testParams
	if err := Decode(map[string]any{"wait": Duration{1500 * time.Millisecond}}, &p); err != nil {
		t.Fatal(err)
	}
	if p.Wait.Duration != 1500*time.Millisecond {
		t.Errorf("got %v", p.Wait)
	}
}

func ExampleDecode() {
	var p struct {
		Command []string `toml:"command"`
		Grace   Duration `toml:"grace"`
	}
	p.Grace = Duration{10 * time.Second} // the default

	err := Decode(map[string]any{"command": []any{"/bin/true"}}, &p)
	fmt.Println(p.Command, p.Grace, err)

	err = Decode(map[string]any{"comand": []any{"/bin/true"}}, &p)
	fmt.Println(err)

	err = Decode(map[string]any{"grace": "soon"}, &p)
	fmt.Println(err)
	// Output:
	// [/bin/true] 10s <nil>
	// unknown parameter "comand"
	// parameter "grace": bad duration "soon" (want e.g. "30s" or "1m30s")
}

// Decode reports every bad key, in key order, not only the first.
func TestDecodeReportsEveryKey(t *testing.T) {
	var p testParams
	err := Decode(map[string]any{"zzz": 1, "count": "x", "aaa": 2}, &p)
	if err == nil {
		t.Fatal("no error")
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], `"aaa"`) || !strings.Contains(lines[1], `parameter "count"`) ||
		!strings.Contains(lines[2], `"zzz"`) {
		t.Errorf("err = %v; want the three bad keys in order", err)
	}
}
