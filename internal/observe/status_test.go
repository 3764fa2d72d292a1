package observe_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/observe"
	"github.com/slotd/slotd/internal/stats"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/memlock"
	"github.com/slotd/slotd/scheduler"
	"github.com/slotd/slotd/scheduler/history"
	"github.com/slotd/slotd/scheduler/schedule"
)

// fleet is a Memory store on a clock the test sets, and a history.
type fleet struct {
	t     *testing.T
	now   time.Time
	store *memlock.Store
	hist  *history.Memory
}

func newFleet(t *testing.T, now time.Time) *fleet {
	f := &fleet{t: t, now: now, hist: history.NewMemory(0)}
	f.store = memlock.New(func() time.Time { return f.now })
	return f
}

// attempt claims task's slot at at for replica and, unless outcome is "",
// finishes it then and records it in the history.
func (f *fleet) attempt(task *scheduler.Task, slot time.Time, replica string, at time.Time, outcome, errText string) {
	f.t.Helper()
	ctx := context.Background()
	s := task.Slot(slot)
	f.now = at
	c, err := f.store.Claim(ctx, s, replica, lock.Policy{Lease: time.Minute, DoneTTL: task.DoneTTL, MaxAttempts: task.MaxAttempts})
	if err != nil || c.Result != lock.Won {
		f.t.Fatalf("claim %s at %v: %+v, %v", s, at, c, err)
	}
	if outcome == "" {
		return
	}
	owner := lock.Owner{ID: replica, Attempt: c.Attempt}
	f.now = at.Add(2 * time.Second)
	if outcome == "success" {
		err = f.store.Complete(ctx, s, owner, task.DoneTTL)
	} else {
		err = f.store.Release(ctx, s, owner)
	}
	if err != nil {
		f.t.Fatal(err)
	}
	err = f.hist.Append(ctx, task.Name, scheduler.HistoryEntry{
		Slot: s.ID, SlotTime: s.Time, Attempt: c.Attempt, Token: lock.Token(s.Time, c.Attempt),
		Replica: replica, Outcome: stats.Outcome(outcome), Started: at, Duration: 2 * time.Second, Error: errText,
	})
	if err != nil {
		f.t.Fatal(err)
	}
}

func statusTask(t *testing.T, name, spec string, maxAttempts int, doneTTL time.Duration) scheduler.Task {
	t.Helper()
	sched, err := schedule.Parse(spec, "")
	if err != nil {
		t.Fatal(err)
	}
	return scheduler.Task{
		Name: name, Spec: spec, Plugin: "test", Params: map[string]any{},
		Policy:  lock.Policy{Lease: 3 * time.Second, DoneTTL: doneTTL, MaxAttempts: maxAttempts},
		Timeout: time.Minute, Catchup: scheduler.CatchupNone, Schedule: sched,
	}
}

// Status reads each slot's fate from the store, the history and the clock:
// a completed, a running, a failed, an exhausted, a missed slot and more.
func TestStatus(t *testing.T) {
	base := time.Date(2024, 1, 15, 14, 30, 0, 0, time.UTC)
	minute := statusTask(t, "minutely", "@every 1m", 2, 6*time.Minute)
	hourly := statusTask(t, "hourly", "@every 1h", 3, 48*time.Hour)
	daily := statusTask(t, "daily", "@every 24h", 3, 48*time.Hour)
	tasks := []scheduler.Task{minute, hourly, daily}
	at := func(m, s int) time.Time { return base.Add(time.Duration(m)*time.Minute + time.Duration(s)*time.Second) }

	f := newFleet(t, base)
	mt := &tasks[0]
	f.attempt(mt, at(-6, 0), "r1", at(-6, 1), "success", "")         // 14:24: done, keys expired by now
	f.store.Set("slotd:{minutely:202401151425}", "weird", time.Hour) // 14:25: foreign
	// 14:23: the task succeeded but the slot could not be marked done.
	f.attempt(mt, at(-7, 0), "r1", at(-7, 1), "success_unmarked", "task succeeded but the slot could not be marked done")
	f.attempt(mt, at(-4, 0), "r1", at(-4, 1), "failure", "exit status 1")
	f.attempt(mt, at(-3, 0), "r1", at(-3, 1), "success", "")
	f.attempt(mt, at(-2, 0), "r1", at(-2, 1), "failure", "first")
	f.attempt(mt, at(-2, 0), "r2", at(-2, 5), "failure", `<b>boom</b>`)
	f.attempt(mt, at(0, 0), "r2", at(0, 1), "", "") // 14:30: running
	f.attempt(&tasks[1], base.Truncate(time.Hour), "r3", at(-29, 0), "failure", "x")
	now := at(0, 10)
	f.now = now

	got, err := observe.Status(context.Background(), tasks, f.store, f.hist, now, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("%d tasks, want 3", len(got))
	}
	m := got[0]
	if m.Name != "minutely" || m.Schedule != "@every 1m" || m.Timezone != "UTC" || m.MaxAttempts != 2 ||
		!m.Next.Equal(at(1, 0)) || len(m.Slots) != 10 {
		t.Fatalf("minutely: %+v", m)
	}
	want := []struct {
		id, phase, state string
		attempts         int
		replica          string
		last             string // outcome of the latest recorded attempt
	}{
		{"202401151430", "running", "running", 1, "r2", ""},
		{"202401151429", "missed", "free", 0, "", ""},
		{"202401151428", "exhausted", "free", 2, "", "failure"},
		{"202401151427", "done", "done", 1, "r1", "success"},
		{"202401151426", "failed", "free", 1, "", "failure"},
		{"202401151425", "foreign", "foreign", 0, "", ""},
		{"202401151424", "done", "free", 0, "", "success"},
		{"202401151423", "done", "free", 0, "", "success_unmarked"}, // keys expired; the history says it ran
		{"202401151422", "unknown", "free", 0, "", ""},
		{"202401151421", "unknown", "free", 0, "", ""},
	}
	for i, w := range want {
		s := m.Slots[i]
		last := ""
		if s.Last != nil {
			last = string(s.Last.Outcome)
		}
		if s.ID != w.id || s.Phase != w.phase || s.State != w.state || s.Attempts != w.attempts || s.Replica != w.replica || last != w.last {
			t.Errorf("slot %d: got id %s phase %s state %s attempts %d replica %q last %q; want %+v",
				i, s.ID, s.Phase, s.State, s.Attempts, s.Replica, last, w)
		}
		if !s.Deadline.Equal(s.Time.Add(time.Minute)) {
			t.Errorf("slot %s: deadline %v, want a minute after %v", s.ID, s.Deadline, s.Time)
		}
	}
	if s := m.Slots[2]; s.Last == nil || s.Last.Attempt != 2 || s.Last.Replica != "r2" || s.Last.Error != "<b>boom</b>" {
		t.Errorf("exhausted slot: latest attempt %+v, want attempt 2 by r2 with its error", s.Last)
	}
	if s := m.Slots[3]; !s.Finished.Equal(at(-3, 3)) || s.Attempt != 1 || s.Last.Duration != 2*time.Second {
		t.Errorf("done slot: finished %v attempt %d last %+v", s.Finished, s.Attempt, s.Last)
	}
	if h := got[1].Slots[0]; h.ID != "2024011514" || h.Phase != "retrying" || h.Attempts != 1 {
		t.Errorf("hourly's open slot after a failure: %+v, want retrying", h)
	}
	if d := got[2].Slots[0]; d.ID != "20240115" || d.Phase != "pending" {
		t.Errorf("daily's open slot: %+v, want pending", d)
	}

	// The JSON is snake_case, with the latest attempt nested.
	b, err := json.Marshal(observe.StatusReport{Now: now, Tasks: got})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{`"now":`, `"tasks":`, `"name":"minutely"`, `"max_attempts":2`, `"next":"2024-01-15T14:31:00Z"`,
		`"id":"202401151427"`, `"phase":"done"`, `"state":"done"`, `"finished":"2024-01-15T14:27:03Z"`,
		`"last_attempt":{`, `"duration_ms":2000`} {
		if !bytes.Contains(b, []byte(k)) {
			t.Errorf("JSON lacks %s:\n%s", k, b)
		}
	}
	if bytes.Contains(b, []byte(`"finished":"0001`)) {
		t.Errorf("JSON writes a zero finished time:\n%s", b)
	}

	// The task's page shows every slot with its phase, and escapes what it
	// shows; the overview puts the task whose latest slot failed first.
	var page bytes.Buffer
	if err := observe.WriteTaskPage(&page, observe.TaskPage{TaskDetail: observe.TaskDetail{Now: now, Task: m}}); err != nil {
		t.Fatal(err)
	}
	html := page.String()
	for _, s := range m.Slots {
		if !strings.Contains(html, `data-slot="`+s.ID+`" data-phase="`+s.Phase+`"`) {
			t.Errorf("page lacks slot %s as %s", s.ID, s.Phase)
		}
	}
	if strings.Contains(html, "<b>boom") || !strings.Contains(html, "&lt;b&gt;boom&lt;/b&gt;") {
		t.Errorf("page does not escape an error")
	}
	page.Reset()
	if err := observe.WritePage(&page, observe.Page{Overview: observe.NewOverview(now, got, observe.Filter{})}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(page.String(), `http-equiv="refresh" content="5"`) {
		t.Errorf("the overview does not refresh itself")
	}
}

// A store that cannot answer fails the status, naming the task.
func TestStatusStoreError(t *testing.T) {
	task := statusTask(t, "report", "@every 1h", 3, 48*time.Hour)
	_, err := observe.Status(context.Background(), []scheduler.Task{task}, downStore{memlock.New(nil)}, nil, time.Now(), 3)
	if err == nil || !errors.Is(err, errDown) || !strings.Contains(err.Error(), "report") {
		t.Errorf("Status on a store that is down: %v", err)
	}
}

var errDown = errors.New("connection refused")

type downStore struct{ lock.Store }

func (downStore) States(context.Context, []lock.Slot) ([]lock.State, error) { return nil, errDown }
