package integration

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// postBackfill asks the replica listening at addr for a backfill of task
// over [from, to) with token.
func postBackfill(t *testing.T, addr, token, task string, from, to time.Time) (int, string) {
	t.Helper()
	q := url.Values{"from": {from.Format(time.RFC3339)}, "to": {to.Format(time.RFC3339)}}
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/api/v1/tasks/"+task+"/backfill?"+q.Encode(), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// postBackfillRunning is postBackfill, again while the replica's scheduler
// has not started its loop yet (a moment after its HTTP server listens).
func postBackfillRunning(t *testing.T, addr, token, task string, from, to time.Time) (int, string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		code, body := postBackfill(t, addr, token, task, from, to)
		if !strings.Contains(body, "not running yet") || time.Now().After(deadline) {
			return code, body
		}
	}
}

// A backfill lives on the replica that took it. Killed with SIGKILL while
// its first slots run, that replica takes the rest of the range with it:
// no peer starts any of the range's slots, and the slots it was running
// are left to their leases. The same request sent to a peer then runs
// every slot not done: the killed ones as attempt 2 (a higher token), the
// others as attempt 1; each slot ends done once.
func TestBackfillReplicaKilled(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	token := "backfill-token-0123456789"
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	task := c.execTask("hourly", "0 * * * *", `rec start; if [ "$SLOTD_REPLICA" = r1 ]; then sleep 60; fi; rec end`, `catchup = "none"`)
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("r%d", i)
		cfg := strings.Replace(config(name, c.srv.URL(), "1s", `lease = "2s"
max_attempts = 3
timeout = "2m"`, task), `listen = "127.0.0.1:0"`, `listen = "127.0.0.1:0"`+"\ntoken_file = "+q(tokenFile), 1)
		c.reps = append(c.reps, startReplica(t, name, cfg))
	}
	c.awaitStarted(10 * time.Second)
	to := time.Now().UTC().Truncate(time.Hour)
	from := to.Add(-6 * time.Hour)
	r1 := c.replica("r1")
	if code, body := postBackfillRunning(t, r1.httpAddr(10*time.Second), token, "hourly", from, to); code != http.StatusAccepted || !strings.Contains(body, `"slots": 6`) {
		t.Fatalf("backfill on r1: %d %s", code, body)
	}
	// Four at once (BackfillInFlight), oldest first.
	evs := c.ledger.await("4 slots started on r1", 20*time.Second, func(evs []event) bool { return len(find(evs, "start", 1)) >= 4 })
	r1.Kill9()
	running := map[string]bool{}
	for _, e := range evs {
		if e.Replica != "r1" || e.Slot < from.Format("2006010215") || e.Slot >= from.Add(4*time.Hour).Format("2006010215") {
			t.Fatalf("want the 4 oldest slots started on r1:\n%s", dump(evs))
		}
		running[e.Slot] = true
	}
	// What is lost: once the killed attempts' leases have run out, their
	// slots are free, and no peer has started them or the two never admitted.
	for slot := range running {
		c.awaitKey(stateKey("hourly", slot), "to expire with r1's lease", 10*time.Second, func(_ string, ok bool) bool { return !ok })
	}
	if evs := c.ledger.read(); len(evs) != 4 {
		t.Fatalf("after r1's death, a peer ran slots of its backfill:\n%s", dump(evs))
	}

	// The same request to r2 runs every slot of the range not done.
	if code, body := postBackfillRunning(t, c.replica("r2").httpAddr(10*time.Second), token, "hourly", from, to); code != http.StatusAccepted {
		t.Fatalf("backfill on r2: %d %s", code, body)
	}
	evs = c.ledger.await("6 slots ended", 30*time.Second, func(evs []event) bool { return slotsWith(evs, "end", 1) >= 6 })
	for slot, es := range bySlot(evs) {
		ends := find(es, "end", 0)
		switch {
		case len(ends) != 1:
			t.Errorf("slot %s ended %d times:\n%s", slot, len(ends), dump(es))
		case running[slot] && (ends[0].Attempt != 2 || ends[0].Token <= es[0].Token):
			t.Errorf("slot %s, killed on r1, ended as %v; want attempt 2 with a higher token", slot, ends[0])
		case !running[slot] && ends[0].Attempt != 1:
			t.Errorf("slot %s, never started on r1, ended as %v; want attempt 1", slot, ends[0])
		}
	}
	if bad, total := c.keysWithoutTTL(); len(bad) > 0 {
		t.Errorf("%d of %d keys without a TTL: %v", len(bad), total, bad)
	}
}
