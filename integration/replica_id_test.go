package integration

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
)

// ownerInstance matches the instance nonce in a slot state's owner,
// "run:<replica>#<nonce>:<attempt>" or "done:<replica>#<nonce>:<attempt>:<ms>".
var ownerInstance = regexp.MustCompile(`^((?:run|done):.*)#[0-9a-f]+(:[0-9]+(?::[0-9]+)?)$`)

// withoutInstance drops the instance nonce from a slot state value.
func withoutInstance(v string) string { return ownerInstance.ReplaceAllString(v, "$1$2") }

// Issue 16 item 7: two daemons started with one replica id ran the same
// attempt side by side, each renewing the other's lease. Now the second is
// refused at start (exit 1, an error naming the id and the fix) while the
// first keeps running, and the first's lease owner carries its instance.
func TestDuplicateReplicaIDRefused(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.start(1, "1s", `lease = "2s"
catchup = "none"`, c.execTask("tick", "@every 2s", `rec start; rec end`, ""))
	evs := c.ledger.await("a first attempt", 15*time.Second, func(evs []event) bool { return len(find(evs, "end", 0)) > 0 })
	slot := find(evs, "end", 0)[0].Slot
	// The task's "end" line comes before the daemon marks the slot done.
	awaitPoll(t, "the slot marked done by r1 with its instance", 10*time.Second,
		func() string { return c.rdb.Get(t.Context(), stateKey("tick", slot)).Val() },
		func(v string) bool { return strings.HasPrefix(v, "done:r1#") },
		func(v string) string { return fmt.Sprintf("state %q, want done:r1#<instance>:...", v) })

	dup := startReplica(t, "r1-dup", config("r1", c.srv.URL(), "1s", `lease = "2s"
catchup = "none"`, c.execTask("tick", "@every 2s", `rec start; rec end`, "")))
	st := dup.Wait(30 * time.Second)
	if st.ExitCode() != 1 {
		t.Errorf("second daemon with replica r1: exit %v, want 1", st)
	}
	log := dup.log()
	if !strings.Contains(log, `replica id \"r1\"`) || !strings.Contains(log, "[daemon] replica") {
		t.Errorf("the refusal does not name the id and the fix:\n%s", tail(log, 20))
	}
	if !c.reps[0].running() {
		t.Fatalf("the first r1 stopped")
	}
	c.stopAll()
}
