package integration

// The daemon on a ZooKeeper ensemble ([zookeeper] servers): three replicas
// run every slot once; the command line reads and resets the slots and the
// history there; a member or the leader killed mid-slot, a replica cut off
// until its session expires, and a lost quorum keep every slot at once.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/zktest"
	"github.com/slotd/slotd/lock"
	zklock "github.com/slotd/slotd/lock/zklock"
)

// zkConfig is a daemon configuration for one replica on the ensemble
// reached at servers.
func zkConfig(replica string, servers []string, defaults string, tasks ...string) string {
	quoted := make([]string, len(servers))
	for i, s := range servers {
		quoted[i] = q(s)
	}
	return fmt.Sprintf(`[daemon]
replica = %s
shutdown_grace = "1s"

[zookeeper]
servers = [%s]

[http]
listen = "127.0.0.1:0"

[log]
level = "debug"
format = "json"

[defaults]
%s
%s`, q(replica), strings.Join(quoted, ", "), defaults, strings.Join(tasks, "\n"))
}

// zkCluster is replicas on an ensemble, sharing a ledger.
func zkCluster(t *testing.T, e *zktest.Ensemble) *cluster {
	return &cluster{t: t, ledger: &ledger{t: t, path: filepath.Join(t.TempDir(), "ledger")}}
}

// zkStore opens the test's own view of the ensemble's slots.
func zkStore(t *testing.T, servers []string) *zklock.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := zklock.Dial(ctx, zklock.Options{Servers: servers, SessionTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// checkOnce checks that every slot of the ledger started and ended once,
// attempt 1, with the common fencing token, and none is missing between
// the first and the last.
func checkOnce(t *testing.T, evs []event) []string {
	t.Helper()
	slots := bySlot(evs)
	ids := sortedSlots(slots)
	var prev time.Time
	for _, id := range ids {
		es := slots[id]
		at := slotTime(t, id)
		starts, ends := find(es, "start", 0), find(es, "end", 0)
		if len(starts) != 1 || len(ends) != 1 || len(es) != 2 {
			t.Errorf("slot %s: want one start and one end, got:\n%s", id, dump(es))
			continue
		}
		if s := starts[0]; s.Attempt != 1 || s.Token != lock.Token(at, 1) || s.At.Before(at) {
			t.Errorf("slot %s: %v; want attempt 1, token %d, not before %v", id, s, lock.Token(at, 1), at)
		}
		if !prev.IsZero() && at.Sub(prev) != time.Second {
			t.Errorf("slots lost between %s and %s", prev.Format("150405"), at.Format("150405"))
		}
		prev = at
	}
	return ids
}

func TestZooKeeperEverySlotOnce(t *testing.T) {
	e := zktest.Start(t, 3)
	c := zkCluster(t, e)
	task := c.execTask("tick", "@every 1s", `rec start; sleep 0.2; rec end`, "")
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("r%d", i)
		c.reps = append(c.reps, startReplica(t, name, zkConfig(name, e.Servers(), `lease = "5s"
max_attempts = 3
timeout = "1m"
catchup = "none"`, task)))
	}
	c.ledger.await("6 completed slots", 40*time.Second, func(evs []event) bool { return slotsWith(evs, "end", 1) >= 6 })
	c.stopAll()
	evs := c.ledger.read()
	ids := checkOnce(t, evs)
	if len(ids) < 6 {
		t.Fatalf("%d slots, want >= 6:\n%s", len(ids), dump(evs))
	}
	// The slots are done in ZooKeeper, by the replica the ledger names.
	s := zkStore(t, e.Servers())
	for _, id := range ids {
		st, err := lock.ReadState(context.Background(), s, lock.Slot{Task: "tick", ID: id})
		if err != nil || st.Status != "done" || st.Attempts != 1 || st.TTL <= 0 || st.Holder != bySlot(evs)[id][0].Replica {
			t.Errorf("slot %s: state %+v, %v; want done by %s with a TTL", id, st, err, bySlot(evs)[id][0].Replica)
		}
	}
}

// status, history and rerun work on the ensemble as on Redis.
func TestZooKeeperCommandLine(t *testing.T) {
	e := zktest.Start(t, 3)
	c := zkCluster(t, e)
	// A window of a minute: the rerun below comes after three commands
	// have run, seconds after the slot on a loaded machine, and is refused
	// once the slot's window has closed (as on etcd).
	task := c.execTask("tick", "@every 1s", `rec start; echo "rev=$SLOTD_STORE_REVISION" >> "$LEDGER.rev"; rec end`, `deadline = "1m"`)
	cfg := zkConfig("r1", e.Servers(), `lease = "5s"
catchup = "none"`, task)
	c.reps = append(c.reps, startReplica(t, "r1", cfg))
	c.ledger.await("2 completed slots", 30*time.Second, func(evs []event) bool { return slotsWith(evs, "end", 1) >= 2 })
	c.stopAll()
	path := filepath.Join(t.TempDir(), "slotd.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := slotd(t, "validate", "-config", path); r.code != 0 || !strings.Contains(r.stdout, "zookeeper (3 servers)") {
		t.Fatalf("validate: %d %s %s", r.code, r.stdout, r.stderr)
	}
	ids := sortedSlots(bySlot(c.ledger.read()))
	last := ids[len(ids)-1]
	if r := slotd(t, "status", "-config", path); r.code != 0 || !strings.Contains(r.stdout, "tick") || !strings.Contains(r.stdout, "done") {
		t.Fatalf("status: %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if r := slotd(t, "history", "-config", path, "tick"); r.code != 0 || !strings.Contains(r.stdout, last) || !strings.Contains(r.stdout, "success") {
		t.Fatalf("history: %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	revs, _ := os.ReadFile(c.ledger.path + ".rev")
	if strings.Contains(string(revs), "rev=\n") || !strings.Contains(string(revs), "rev=") {
		t.Errorf("tasks got no SLOTD_STORE_REVISION (the claim's zxid):\n%s", revs)
	}
	r := slotd(t, "rerun", "-config", path, "tick", last)
	if r.code != 0 {
		t.Fatalf("rerun: %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	st, err := lock.ReadState(context.Background(), zkStore(t, e.Servers()), lock.Slot{Task: "tick", ID: last})
	if err != nil || st.Status != "free" || st.Attempts != 1 {
		t.Fatalf("after rerun: %+v, %v; want free with 1 attempt made", st, err)
	}
}
