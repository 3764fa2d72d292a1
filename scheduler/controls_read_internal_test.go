package scheduler

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

// readEach falls back to one read per task only for an error one task's
// key can cause; a context's end (the scheduler stopping, a read timed
// out) is logged once, with no read more.
func TestReadEachStopsAtContextEnd(t *testing.T) {
	names := make([]string, 1000)
	for i := range names {
		names[i] = fmt.Sprintf("t%04d", i)
	}
	for _, tc := range []struct {
		name      string
		err       error
		wantReads int
		wantWarns int
	}{
		{"cancelled", fmt.Errorf("zklock: get: %w", context.Canceled), 1, 1},
		{"timed out", fmt.Errorf("read: %w", context.DeadlineExceeded), 1, 1},
		// A value slotd did not write fails the batch; the tasks are read
		// one at a time, and only the bad one is logged.
		{"foreign key", errors.New("t0007: not a pause record"), 1 + len(names), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			log := slog.New(slog.NewTextHandler(&buf, nil))
			reads := 0
			read := func(ns []string) ([]bool, error) {
				reads++
				if len(ns) > 1 || ns[0] == "t0007" {
					return nil, tc.err
				}
				return []bool{true}, nil
			}
			_, ok := readEach(names, read, log, "pause states")
			if reads != tc.wantReads {
				t.Errorf("%d reads, want %d", reads, tc.wantReads)
			}
			if warns := strings.Count(buf.String(), "level=WARN"); warns != tc.wantWarns {
				t.Errorf("%d warnings, want %d:\n%s", warns, tc.wantWarns, buf.String())
			}
			read1 := 0
			for _, o := range ok {
				if o {
					read1++
				}
			}
			if want := map[bool]int{true: 0, false: len(names) - 1}[tc.wantReads == 1]; read1 != want {
				t.Errorf("%d tasks read, want %d", read1, want)
			}
		})
	}
}
