package cli

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/slotd/slotd/scheduler"
)

// printTiming prints what validate resolved in a task's schedule keys
// beyond the spec as written: H replaced by the task's hash, the active
// bounds, the jitter, the retry backoff's waits; and a concurrency policy
// other than allow, since it decides whether a slot starts when it fires.
func printTiming(w io.Writer, t *scheduler.Task) {
	var resolved []string
	for _, p := range t.Schedule.Parts() {
		resolved = append(resolved, p.Spec())
	}
	if r := strings.Join(resolved, "; "); r != t.Spec {
		fmt.Fprintf(w, "  resolved: %q (H hashed from the task name)\n", r)
	}
	if b := t.Schedule.Bounds(); !b.From.IsZero() || !b.Until.IsZero() {
		fmt.Fprintf(w, "  active: %s to %s\n", boundText(b.From), boundText(b.Until))
	}
	if t.Jitter > 0 {
		fmt.Fprintf(w, "  jitter: %s (each slot starts its own hashed delay after the slot time)\n", t.Jitter)
	}
	if b := t.RetryBackoff; b.Min > 0 && t.MaxAttempts > 1 {
		var waits []string
		for n := range min(t.MaxAttempts-1, 8) {
			waits = append(waits, b.Ceil(n).String())
		}
		if t.MaxAttempts-1 > 8 {
			waits = append(waits, "...")
		}
		fmt.Fprintf(w, "  retry_backoff: %s after failed attempts 1, 2, ... (±%g each; none past the deadline)\n", strings.Join(waits, ", "), b.Spread)
	}
	if note, ok := concurrencyNotes[t.Concurrency]; ok {
		fmt.Fprintf(w, "  concurrency: %s (%s)\n", t.Concurrency, note)
	}
}

// concurrencyNotes says what a slot that fires while the task's previous
// slot still runs does, by policy; allow, the default, is not shown.
var concurrencyNotes = map[scheduler.Concurrency]string{
	scheduler.ConcurrencyForbid:  "a slot fired while the previous one runs is skipped",
	scheduler.ConcurrencyReplace: "a slot fired while the previous one runs cancels it and runs",
	scheduler.ConcurrencyQueue:   "a slot fired while the previous one runs waits and starts when it ends, if its window is open; at most one waits, later ones are skipped",
}

func boundText(at time.Time) string {
	if at.IsZero() {
		return "open"
	}
	return at.UTC().Format(time.RFC3339)
}

// startNote is a fire time's start, when jitter delays it.
func startNote(t *scheduler.Task, at time.Time) string {
	if t.Jitter <= 0 {
		return ""
	}
	d := t.StartDelay(at)
	return fmt.Sprintf("  start %s (+%s)", at.Add(d).UTC().Format("2006-01-02T15:04:05.000Z07:00"), d)
}
