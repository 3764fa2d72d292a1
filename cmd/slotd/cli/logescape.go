package cli

import (
	"fmt"
	"log/slog"
	"strings"
	"unicode/utf8"
)

// escapeAttr is a slog ReplaceAttr that escapes control characters in the
// message and in every string and error value (and key), in every log
// format, so that a task's output (or a Redis server's error) cannot drive
// the reader's terminal: ANSI escapes, carriage returns that overwrite a
// line, C1 controls and bidirectional overrides all become visible
// escapes. keepNewlines leaves \n and \t alone, for JSON, which escapes
// them itself and whose readers want a multi-line output intact.
func escapeAttr(keepNewlines bool) func([]string, slog.Attr) slog.Attr {
	return func(_ []string, a slog.Attr) slog.Attr {
		a.Key = escapeControls(a.Key, keepNewlines)
		switch a.Value.Kind() {
		case slog.KindString:
			a.Value = slog.StringValue(escapeControls(a.Value.String(), keepNewlines))
		case slog.KindAny:
			switch v := a.Value.Any().(type) {
			case error:
				a.Value = slog.StringValue(escapeControls(v.Error(), keepNewlines))
			case []string:
				out := make([]string, len(v))
				for i, s := range v {
					out[i] = escapeControls(s, keepNewlines)
				}
				a.Value = slog.AnyValue(out)
			}
		}
		return a
	}
}

// escapeControls returns s with every control character written as a Go
// escape (\n, \r, \t, \u001b, \u009b, \u202e) and every invalid UTF-8 byte
// as U+FFFD. It never writes \x: tint, colouring, turns `\x1b` in its
// quoted output back into ESC, so a backslash that precedes "x1b" is
// written as \u005c too.
func escapeControls(s string, keepNewlines bool) string {
	clean := func(r rune) bool {
		return !(r < 0x20 && !(keepNewlines && (r == '\n' || r == '\t'))) && !(r >= 0x7f && r <= 0x9f) && !isBidi(r) &&
			r != utf8.RuneError && r != '\u2028' && r != '\u2029'
	}
	i := 0
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if !clean(r) || (r == '\\' && strings.HasPrefix(s[i+1:], "x1b")) {
			break
		}
		i += n
	}
	if i == len(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	b.WriteString(s[:i])
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b.WriteRune(utf8.RuneError)
		case r == '\\' && strings.HasPrefix(s[i+1:], "x1b"):
			b.WriteString(`\u005c`)
		case clean(r):
			b.WriteString(s[i : i+n])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
		i += n
	}
	return b.String()
}

// isBidi reports the Unicode bidirectional formatting characters, which
// reorder what a terminal shows ("Trojan Source").
func isBidi(r rune) bool {
	return r == '\u061c' || r == '\u200e' || r == '\u200f' || (r >= '\u202a' && r <= '\u202e') || (r >= '\u2066' && r <= '\u2069')
}
