package config

import (
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
)

// maxFuzzInput bounds FuzzParse's inputs: large enough for every construct
// and for nesting well past MaxDepth, small enough that each run is quick.
const maxFuzzInput = 64 << 10

// FuzzParse feeds whole files (seeds in testdata/fuzz/FuzzParse, plus the
// sample config.toml) to Parse: it must not panic, must return exactly one
// of a config and an error, the same error every time, and never accept an
// invalid task; and whatever checkBounds lets through must decode to no
// more than MaxDepth levels, so that the decoder's cost stays bounded.
func FuzzParse(f *testing.F) {
	f.Add([]byte(minimal))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > maxFuzzInput {
			t.Skip()
		}
		if checkBounds(data) == nil {
			var m map[string]any
			if _, err := toml.Decode(string(data), &m); err == nil {
				if d := treeDepth(m); d > MaxDepth {
					t.Fatalf("checkBounds passed a file %d levels deep", d)
				}
			}
		}
		cfg, err := Parse(data, "fuzz.toml", nil, testPlugins)
		if (cfg == nil) == (err == nil) {
			t.Fatalf("cfg %v, err %v: exactly one must be set", cfg, err)
		}
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.toml: ") {
				t.Fatalf("error does not name the file: %v", err)
			}
			if _, again := Parse(data, "fuzz.toml", nil, testPlugins); again == nil || again.Error() != err.Error() {
				t.Fatalf("errors differ between two parses:\n%v\n%v", err, again)
			}
			return
		}
		for _, task := range cfg.Tasks {
			if task.Schedule == nil || task.Plugin == "" || task.Params == nil || task.Lease < time.Second ||
				task.MaxAttempts < 1 || task.MaxAttempts > 999 || task.DoneTTL < window(task) || task.Timeout <= 0 {
				t.Fatalf("invalid task accepted: %+v", task)
			}
		}
	})
}
