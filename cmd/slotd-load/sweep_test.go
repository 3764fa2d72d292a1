package main

import (
	"io"
	"slices"
	"strings"
	"testing"
)

func TestParseSweep(t *testing.T) {
	if got, err := parseSweep("3, 6,12"); err != nil || !slices.Equal(got, []int{3, 6, 12}) {
		t.Errorf("parseSweep(3, 6,12) = %v, %v", got, err)
	}
	for _, bad := range []string{"3", "6,3", "3,3", "0,3", "3,65", "3,x", ""} {
		if _, err := parseSweep(bad); err == nil || !strings.Contains(err.Error(), "-sweep") {
			t.Errorf("parseSweep(%q): %v, want an error naming -sweep", bad, err)
		}
	}
}

// The flags that make no sense together are refused before anything starts.
func TestSweepFlagsRefused(t *testing.T) {
	for _, args := range [][]string{
		{"-sweep", "3,6"}, // the burst measurement
		{"-rate", "10", "-sweep", "3,6", "-replicas", "3"}, // two sources of the count
		{"-rate", "10", "-rounds", "2"},                    // rounds without a sweep
		{"-rate", "10", "-sweep", "6,3"},
	} {
		var stderr strings.Builder
		if code := run(args, io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), "-") {
			t.Errorf("%v: exit %d, stderr %q; want 2 and a message naming the flag", args, code, stderr.String())
		}
	}
}
