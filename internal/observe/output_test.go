package observe_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/observe"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/memlock"
	"github.com/slotd/slotd/scheduler"
)

// An attempt's output is in the status JSON with its slot's last attempt,
// and on the page where attempts are shown, escaped: it is the task's own
// text, attacker-controlled.
func TestOutputShownEscaped(t *testing.T) {
	s := newServed(t, memlock.New(nil))
	task := s.task("backup")
	at, _ := task.Schedule.Latest(time.Now())
	slot := task.Slot(at)
	hostile := "<script>alert(\"pwned\")</script>\n<img src=x onerror=alert(1)> & \x1b[31mred\n"
	if err := s.hist.Append(context.Background(), "backup", scheduler.HistoryEntry{
		Slot: slot.ID, SlotTime: slot.Time, Attempt: 1, Token: lock.Token(slot.Time, 1), Replica: "r1",
		Outcome: "failure", Started: time.Now(), Duration: time.Second, Error: "exit status 1", Output: hostile,
	}); err != nil {
		t.Fatal(err)
	}

	_, body := s.get("/api/v1/tasks")
	if strings.Contains(body, "<script>") || strings.Contains(body, "<img") || !strings.Contains(body, `\u003cscript\u003e`) {
		t.Errorf("the JSON does not escape the output's markup:\n%s", body)
	}
	var rep observe.StatusReport
	if err := json.Unmarshal([]byte(body), &rep); err != nil {
		t.Fatal(err)
	}
	if last := rep.Tasks[1].Slots[0].Last; last == nil || last.Output != hostile {
		t.Errorf("backup's latest slot's last attempt: %+v, want the output", last)
	}

	_, page := s.get("/tasks/backup")
	if !strings.Contains(page, `<summary>output</summary><pre class="mono">&lt;script&gt;alert(&#34;pwned&#34;)&lt;/script&gt;`+"\n"+
		`&lt;img src=x onerror=alert(1)&gt; &amp; `) {
		t.Errorf("page does not show the output escaped")
	}
	if strings.Contains(page, "<script>alert") || strings.Contains(page, "<img") {
		t.Errorf("page holds the output's markup unescaped")
	}
}
