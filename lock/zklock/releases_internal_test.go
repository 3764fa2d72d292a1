package zklock

import (
	"fmt"
	"testing"
)

// A release notice's name gives back the task and slot id it was made
// of, whatever characters they hold, and a name that is no notice's is
// refused.
func TestNoticeNameRoundTrip(t *testing.T) {
	for _, c := range []struct{ task, id string }{
		{"report", "2024011514"},
		{"with space/and-slash", "20240115143005t"},
		{".hidden", "1"},
		{"dash-1-", "x-0000000001"},
	} {
		name := escape(c.task) + ":" + escape(c.id) + "-" + fmt.Sprintf("%010d", 42)
		task, id, ok := noticeSlot(name)
		if !ok || task != c.task || id != c.id {
			t.Errorf("notice %q read as %q, %q, %v; want %q, %q", name, task, id, ok, c.task, c.id)
		}
	}
	for _, name := range []string{"", "report-0000000001", "report:1", "report:1-123"} {
		if task, id, ok := noticeSlot(name); ok {
			t.Errorf("%q read as a notice of %q, %q", name, task, id)
		}
	}
}
