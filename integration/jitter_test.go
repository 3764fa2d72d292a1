package integration

import (
	"testing"
	"time"

	"github.com/slotd/slotd/scheduler"
	"github.com/slotd/slotd/scheduler/schedule"
)

// Three slotd processes on one jittered task: each slot runs once, as
// attempt 1, no earlier than its slot time plus the task's hashed delay
// (the same on every process, whichever wins), and its id and token are
// the scheduled slot's.
func TestJitterAcrossProcesses(t *testing.T) {
	c := newCluster(t)
	c.start(3, "2s", `lease = "2s"
catchup = "none"`,
		c.execTask("spread", "@every 2s", `rec start; rec end`, `jitter = "1500ms"`))
	evs := c.ledger.await("six slots", 40*time.Second, func(evs []event) bool { return len(find(evs, "end", 0)) >= 6 })
	c.stopAll()
	evs = c.ledger.read()

	sched, err := schedule.Parse("@every 2s", "")
	if err != nil {
		t.Fatal(err)
	}
	task := scheduler.Task{Name: "spread", Schedule: sched, Jitter: 1500 * time.Millisecond}
	delays := map[time.Duration]bool{}
	winners := map[string]bool{}
	for slot, es := range bySlot(evs) {
		starts := find(es, "start", 0)
		if len(starts) != 1 || starts[0].Attempt != 1 {
			t.Errorf("slot %s: want one start, attempt 1:\n%s", slot, dump(es))
			continue
		}
		s := starts[0]
		at := slotTime(t, slot)
		delay := task.StartDelay(at)
		delays[delay], winners[s.Replica] = true, true
		// The ledger's clock is the host's, as is the replicas' (and
		// Redis's): a few milliseconds of tolerance for the offset each
		// replica estimates.
		if early := at.Add(delay).Sub(s.At); early > 50*time.Millisecond {
			t.Errorf("slot %s started %v before its jittered start (delay %v)", slot, early, delay)
		}
		if late := s.At.Sub(at.Add(delay)); late > time.Second {
			t.Errorf("slot %s started %v after its jittered start (delay %v)", slot, late, delay)
		}
		if want := at.Unix()*1000 + 1; s.Token != want {
			t.Errorf("slot %s: token %d, want %d: the token is the scheduled slot's", slot, s.Token, want)
		}
	}
	if len(delays) < 2 {
		t.Errorf("every slot got one delay: %v", delays)
	}
	t.Logf("%d slots, %d distinct delays, winners %v", len(bySlot(evs)), len(delays), winners)
}
