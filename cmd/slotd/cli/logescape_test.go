package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode"
)

// hostile is what a task may print: colours, a title change, a screen
// clear, a carriage return that overwrites the line, a C1 CSI, a
// right-to-left override, a newline that would forge a log line, an
// invalid byte, and the text `\x1b` that tint would turn into ESC.
const hostile = "a\x1b[31mred\x1b]0;title\x07 \x1b[2J\rfake \u009b31m \u202eevil\nlevel=ERROR msg=forged \xff \\x1b[31m"

func logHostile(log *slog.Logger) {
	log.With("task", "t\x1b[1m").Info("task output\x1b[31m\r", "output", hostile, "err", errors.New("failed: "+hostile),
		"lines", []string{hostile})
}

// checkNoControls fails if out holds a control character other than the
// newline ending each record, a C1 control, a bidi override or an invalid
// byte; colour is tint's own, allowed only when colour is.
func checkNoControls(t *testing.T, what, out string, colour bool) {
	t.Helper()
	if !strings.HasSuffix(out, "\n") || strings.Count(out, "\n") != 1 {
		t.Errorf("%s: want one line, got %q", what, out)
	}
	body := strings.TrimSuffix(out, "\n")
	if colour {
		// tint's colours are ESC [ digits m; take them out.
		for _, c := range []string{"\x1b[0m", "\x1b[2m", "\x1b[22m", "\x1b[92m", "\x1b[91m", "\x1b[93m", "\x1b[94m"} {
			body = strings.ReplaceAll(body, c, "")
		}
	}
	for i, r := range body {
		if unicode.IsControl(r) || isBidi(r) || r == unicode.ReplacementChar && body[i] == 0xff {
			t.Errorf("%s: control character %U at %d in %q", what, r, i, body)
			return
		}
	}
	if !strings.Contains(body, `u001b`) || !strings.Contains(body, `u202e`) {
		t.Errorf("%s: the escapes are not visible: %q", what, body)
	}
}

// Every log format escapes control characters, in the message, in values,
// errors and string lists, and in attributes added with With. Before,
// [log] format = "text" wrote the task's ANSI escapes as they were.
func TestLogEscapesControlCharacters(t *testing.T) {
	t.Setenv("NO_COLOR", "")
	for _, format := range []string{"text", "json", "auto"} {
		var buf bytes.Buffer
		logHostile(newLogger(&buf, slog.LevelInfo, format))
		checkNoControls(t, format, buf.String(), false)
		if format == "text" {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
			t.Fatalf("%s: not JSON: %v\n%s", format, err, buf.String())
		}
		// Decoded, JSON's strings keep their newlines and tabs only.
		for k, v := range rec {
			s, _ := v.(string)
			for _, r := range s {
				if (unicode.IsControl(r) && r != '\n' && r != '\t') || isBidi(r) {
					t.Errorf("%s: %s decodes to a control character %U: %q", format, k, r, s)
					break
				}
			}
		}
		if out, _ := rec["output"].(string); !strings.Contains(out, "evil\nlevel=ERROR") {
			t.Errorf("%s: output %q lost its newline", format, out)
		}
	}
}

// Colour only on a terminal and only without NO_COLOR; a file gets none,
// even with format = "text". On a terminal the task's own escapes are
// still escaped, including the text `\x1b`, which tint's colouring would
// turn into ESC.
func TestLogColourOnlyOnATerminal(t *testing.T) {
	t.Setenv("NO_COLOR", "")
	file, err := os.Create(filepath.Join(t.TempDir(), "slotd.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	logHostile(newLogger(file, slog.LevelInfo, "text"))
	data, err := os.ReadFile(file.Name())
	if err != nil {
		t.Fatal(err)
	}
	checkNoControls(t, "text to a file", string(data), false)

	master, tty := openPTY(t)
	read := func() string {
		t.Helper()
		buf := make([]byte, 64<<10)
		n, err := master.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		// The terminal's line discipline turns \n into \r\n.
		return strings.ReplaceAll(string(buf[:n]), "\r\n", "\n")
	}
	for _, format := range []string{"text", "auto"} {
		logHostile(newLogger(tty, slog.LevelInfo, format))
		out := read()
		if !strings.Contains(out, "\x1b[") {
			t.Errorf("%s on a terminal: no colour: %q", format, out)
		}
		checkNoControls(t, format+" on a terminal", out, true)
	}
	t.Setenv("NO_COLOR", "1")
	logHostile(newLogger(tty, slog.LevelInfo, "auto"))
	out := read()
	if strings.Contains(out, "{") && strings.HasPrefix(out, "{") {
		t.Errorf("auto on a terminal wrote JSON: %q", out)
	}
	checkNoControls(t, "NO_COLOR on a terminal", out, false)
}

func TestEscapeControls(t *testing.T) {
	for in, want := range map[string]string{
		"plain text, ünïcödé ✓": "plain text, ünïcödé ✓",
		"a\x1b[31mb":            `a\u001b[31mb`,
		"cr\rlf\ntab\t":         `cr\rlf\ntab\t`,
		"c1 \u009b bidi \u202e": `c1 \u009b bidi \u202e`,
		"bad \xff":              "bad \ufffd",
		`path C:\x1b\y`:         `path C:\u005cx1b\y`,
		`back\slash`:            `back\slash`,
	} {
		if got := escapeControls(in, false); got != want {
			t.Errorf("escapeControls(%q) = %q, want %q", in, got, want)
		}
	}
	if got := escapeControls("a\nb\tc\rd", true); got != "a\nb\tc\\rd" {
		t.Errorf("keeping newlines: %q", got)
	}
}
