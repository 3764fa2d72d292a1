package integration

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// kill -9 of the replica whose attempt failed, right after its release left
// a 3 s retry backoff in Redis: the other replicas still wait for it — the
// not-before time is the store's, not the dead replica's — and run
// attempt 2 no sooner than its end, once.
func TestKill9AfterReleaseBackoffHolds(t *testing.T) {
	t.Parallel()
	const backoff = 3 * time.Second
	c := newCluster(t)
	c.start(3, "1s", `lease = "2s"
max_attempts = 3
timeout = "1m"
catchup = "none"
retry_backoff = { initial = "3s" }`,
		c.execTask("flaky", "@every 20s", `rec start; if [ "$SLOTD_ATTEMPT" = 1 ]; then rec fail; exit 1; fi; rec end`, ""))

	evs := c.ledger.await("a first attempt to fail", 45*time.Second, func(evs []event) bool {
		return len(find(evs, "fail", 1)) > 0
	})
	first := find(evs, "fail", 1)[0]
	slot := first.Slot
	v := c.awaitKey(stateKey("flaky", slot), "to hold the backoff", 5*time.Second, func(v string, _ bool) bool {
		return strings.HasPrefix(v, "backoff:")
	})
	releaser := c.replica(first.Replica)
	releaser.Kill9()
	killAt := time.Now()
	ms, err := strconv.ParseInt(strings.TrimPrefix(v, "backoff:"), 10, 64)
	if err != nil {
		t.Fatalf("state %q: not a backoff value", v)
	}
	notBefore := time.UnixMilli(ms)
	if wait := notBefore.Sub(first.At); wait < backoff-100*time.Millisecond || wait > backoff+3*time.Second {
		t.Errorf("not-before %v is %v after attempt 1 failed, want about %v", notBefore, wait, backoff)
	}
	t.Logf("killed %s %v before the backoff's end", releaser.name, notBefore.Sub(killAt))

	evs = c.ledger.await("attempt 2 of slot "+slot+" to end", 20*time.Second, func(evs []event) bool {
		return len(find(bySlot(evs)[slot], "end", 2)) > 0
	})
	es := bySlot(evs)[slot]
	second := find(es, "start", 2)[0]
	if second.Replica == releaser.name {
		t.Errorf("attempt 2 ran on the killed replica %s", second.Replica)
	}
	// The store's clock is this host's; its not-before is in whole ms.
	if early := notBefore.Sub(second.At); early > time.Millisecond {
		t.Errorf("attempt 2 started %v before the backoff's end", early)
	}
	if late := second.At.Sub(notBefore); late > 5*time.Second {
		t.Errorf("attempt 2 started %v after the backoff's end, want promptly", late)
	}
	if n := len(find(es, "start", 0)); n != 2 {
		t.Errorf("slot %s: %d attempts, want 2:\n%s", slot, n, dump(es))
	}
}
