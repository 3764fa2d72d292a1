package scheduler_test

import (
	"errors"
	"testing"
	"time"

	"github.com/slotd/slotd/scheduler"
	"github.com/slotd/slotd/scheduler/schedule"
)

func TestParseSlot(t *testing.T) {
	half, err := schedule.Parse("30 * * * *", "")
	if err != nil {
		t.Fatal(err)
	}
	task := scheduler.Task{Name: "half", Spec: "30 * * * *", Schedule: half}
	s, err := task.ParseSlot("2024011514")
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2024, 1, 15, 14, 30, 0, 0, time.UTC); !s.Time.Equal(want) || s.ID != "2024011514" ||
		!s.Deadline.Equal(want.Add(time.Hour)) || s.Task != "half" {
		t.Errorf("ParseSlot(2024011514) = %+v, want the 14:30 slot", s)
	}
	even := testTask(t, "even", "@every 2s", nil, func(t *scheduler.Task) { t.DoneTTL = time.Hour })
	for _, tc := range []struct {
		task *scheduler.Task
		id   string
	}{
		{&task, "202401151430"}, // minute resolution for an hourly task
		{&task, "20240115"},
		{&task, "2024011599"},
		{&task, "2024011514 "},
		{&task, ""},
		{&even, "20240115143001"}, // not a multiple of 2s
	} {
		if _, err := tc.task.ParseSlot(tc.id); !errors.Is(err, scheduler.ErrBadSlot) {
			t.Errorf("%s.ParseSlot(%q): %v, want ErrBadSlot", tc.task.Name, tc.id, err)
		}
	}
	if s, err := even.ParseSlot("20240115143002"); err != nil || s.Time.Second() != 2 {
		t.Errorf("even.ParseSlot(20240115143002) = %+v, %v", s, err)
	}
}
