package main

import (
	"bufio"
	"bytes"
	"fmt"
	"testing"
)

// A slot's line is the one printf wrote before, byte for byte: the
// records' reader parses both.
func TestRecorderSlotLineIsPrintfs(t *testing.T) {
	var out bytes.Buffer
	r := &recorder{w: bufio.NewWriter(&out)}
	r.slot('X', "t00042", 1795969200000000000, 1, 1795969200012345678, "", false)
	r.slot('S', "probe-1", -5, 12, 0, "", false)
	r.slot('E', "probe-1", 7, 3, 99, "fail", true) // flushes the lines before it too
	want := fmt.Sprintf("X %s %d %d %d\n", "t00042", int64(1795969200000000000), 1, int64(1795969200012345678)) +
		fmt.Sprintf("S %s %d %d %d\n", "probe-1", -5, 12, 0) +
		fmt.Sprintf("E %s %d %d %d %s\n", "probe-1", 7, 3, 99, "fail")
	if got := out.String(); got != want {
		t.Fatalf("lines:\n%q\nwant (printf's):\n%q", got, want)
	}
}
