package integration

// The daemon on an etcd cluster ([etcd] endpoints): three replicas run
// every slot once; the command line reads and resets the slots and the
// history there; tasks get the claim's etcd revision.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/slotd/slotd/internal/etcdtest"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/etcdlock"
)

// etcdConfig is a daemon configuration for one replica on the etcd
// members at endpoints.
func etcdConfig(replica string, endpoints []string, defaults string, tasks ...string) string {
	quoted := make([]string, len(endpoints))
	for i, s := range endpoints {
		quoted[i] = q(s)
	}
	return fmt.Sprintf(`[daemon]
replica = %s
shutdown_grace = "1s"

[etcd]
endpoints = [%s]

[http]
listen = "127.0.0.1:0"

[log]
level = "debug"
format = "json"

[defaults]
%s
%s`, q(replica), strings.Join(quoted, ", "), defaults, strings.Join(tasks, "\n"))
}

// etcdCluster is replicas sharing a ledger (their store is the etcd
// cluster each one's configuration names).
func etcdCluster(t *testing.T) *cluster {
	return &cluster{t: t, ledger: &ledger{t: t, path: filepath.Join(t.TempDir(), "ledger")}}
}

// etcdStore opens the test's own view of the cluster's slots.
func etcdStore(t *testing.T, endpoints []string) *etcdlock.Store {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	s := etcdlock.New(cli, "slotd")
	t.Cleanup(func() { s.Close(); cli.Close() })
	return s
}

// etcdCheckOnce checks that every slot of the ledger started and ended
// once, attempt 1, with the common fencing token, and that none is missing
// between the first and the last (slots every apart, per task).
func etcdCheckOnce(t *testing.T, evs []event, every time.Duration) []string {
	t.Helper()
	slots := bySlot(evs)
	ids := sortedSlots(slots)
	prev := map[string]time.Time{}
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
		task := es[0].Task
		if p := prev[task]; !p.IsZero() && at.Sub(p) != every {
			t.Errorf("task %s: slots lost between %s and %s", task, p.Format("150405"), at.Format("150405"))
		}
		prev[task] = at
	}
	return ids
}

// etcdTickDefaults are the policy of the etcd tests' every-second task.
const etcdTickDefaults = `lease = "2s"
max_attempts = 3
timeout = "1m"
catchup = "none"`

func TestEtcdEverySlotOnce(t *testing.T) {
	e := etcdtest.Start(t, 3)
	c := etcdCluster(t)
	task := c.execTask("tick", "@every 1s", `rec start; sleep 0.2; rec end`, "")
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("r%d", i)
		c.reps = append(c.reps, startReplica(t, name, etcdConfig(name, e.Endpoints(), etcdTickDefaults, task)))
	}
	c.ledger.await("6 completed slots", 40*time.Second, func(evs []event) bool { return slotsWith(evs, "end", 1) >= 6 })
	c.stopAll()
	evs := c.ledger.read()
	ids := etcdCheckOnce(t, evs, time.Second)
	if len(ids) < 6 {
		t.Fatalf("%d slots, want >= 6:\n%s", len(ids), dump(evs))
	}
	s := etcdStore(t, e.Endpoints())
	for _, id := range ids {
		st, err := lock.ReadState(context.Background(), s, lock.Slot{Task: "tick", ID: id})
		if err != nil || st.Status != "done" || st.Attempts != 1 || st.TTL <= 0 || st.Holder != bySlot(evs)[id][0].Replica {
			t.Errorf("slot %s: state %+v, %v; want done by %s with a TTL", id, st, err, bySlot(evs)[id][0].Replica)
		}
	}
}

// validate, status, history and rerun work on etcd as on Redis; tasks get
// the claim's etcd revision, increasing from slot to slot.
func TestEtcdCommandLine(t *testing.T) {
	e := etcdtest.Start(t, 3)
	c := etcdCluster(t)
	task := c.execTask("tick", "@every 1s", `rec start; echo "$SLOTD_SLOT rev=$SLOTD_STORE_REVISION" >> "$LEDGER.rev"; rec end`, `deadline = "1m"`)
	cfg := etcdConfig("r1", e.Endpoints(), etcdTickDefaults, task)
	c.reps = append(c.reps, startReplica(t, "r1", cfg))
	c.ledger.await("3 completed slots", 30*time.Second, func(evs []event) bool { return slotsWith(evs, "end", 1) >= 3 })
	c.stopAll()
	path := filepath.Join(t.TempDir(), "slotd.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := slotd(t, "validate", "-config", path); r.code != 0 || !strings.Contains(r.stdout, "etcd (3 endpoints)") {
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
	var prev int64
	for _, line := range strings.Split(strings.TrimSpace(string(revs)), "\n") {
		_, v, _ := strings.Cut(line, "rev=")
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= prev {
			t.Fatalf("SLOTD_STORE_REVISION not an increasing etcd revision:\n%s", revs)
		}
		prev = n
	}
	r := slotd(t, "rerun", "-config", path, "tick", last)
	if r.code != 0 {
		t.Fatalf("rerun: %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	st, err := lock.ReadState(context.Background(), etcdStore(t, e.Endpoints()), lock.Slot{Task: "tick", ID: last})
	if err != nil || st.Status != "free" || st.Attempts != 1 {
		t.Fatalf("after rerun: %+v, %v; want free with 1 attempt made", st, err)
	}
}
