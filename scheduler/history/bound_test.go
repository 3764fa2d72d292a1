package history_test

import (
	"context"
	"strings"
	"testing"

	"github.com/slotd/slotd/scheduler/history"
)

// The memory history bounds an entry when it is appended, so that it
// reads back within the caps however large the attempt's output was.
func TestMemoryHistoryBoundsEntries(t *testing.T) {
	ctx := context.Background()
	h := history.NewMemory(0)
	if err := h.Append(ctx, "t", history.Entry{Slot: "s", Error: strings.Repeat("e", 3<<20), Output: strings.Repeat("o", 50<<20)}); err != nil {
		t.Fatal(err)
	}
	es, err := h.RecentBefore(ctx, "t", "", 5)
	if err != nil || len(es) != 1 || len(es[0].Output) > history.MaxOutput || len(es[0].Error) > history.MaxError {
		t.Fatalf("read back %d entries, %v; want 1 within the caps", len(es), err)
	}
}
