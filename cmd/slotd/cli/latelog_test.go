package cli

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// A logger handed out before its handler is chosen (a plugin's, built as
// the file is read) writes through the chosen one, with its attributes and
// groups; what it logged before is written then, if the level allows.
func TestLateHandler(t *testing.T) {
	late := newLateHandler()
	plugin := slog.New(late).With("task", "report").WithGroup("g")
	plugin.Info("built", "n", 1)
	plugin.Debug("dropped: below the level")

	var buf bytes.Buffer
	late.set(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}).WithAttrs([]slog.Attr{slog.String("replica", "r1")}))
	plugin.Warn("ran", "n", 2)
	slog.New(late).Info("direct")

	got := strings.Split(strings.TrimSpace(buf.String()), "\n")
	want := []string{
		"msg=built replica=r1 task=report g.n=1",
		"msg=ran replica=r1 task=report g.n=2",
		"msg=direct replica=r1",
	}
	if len(got) != len(want) {
		t.Fatalf("wrote %d lines, want %d:\n%s", len(got), len(want), buf.String())
	}
	for i, w := range want {
		if !strings.Contains(got[i], w) {
			t.Errorf("line %d = %q, want it to contain %q", i+1, got[i], w)
		}
	}
}
