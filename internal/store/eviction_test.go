package store

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/redislock"
	"github.com/slotd/slotd/scheduler"
	"github.com/slotd/slotd/scheduler/schedule"
	"github.com/slotd/slotd/tasks"
)

// lockedBuffer is a log sink read while a daemon writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// checkEviction opens srv's backend as the daemon does and runs
// CheckEviction, returning its findings and its log.
func checkEviction(t *testing.T, url string) ([]redislock.Eviction, string) {
	t.Helper()
	b, err := Open(context.Background(), parseRedis(t, fmt.Sprintf("url = %q", url)), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var logs bytes.Buffer
	evs := b.CheckEviction(context.Background(), slog.New(slog.NewTextHandler(&logs, nil)))
	return evs, logs.String()
}

// A Redis whose maxmemory-policy may evict slotd's keys is logged at error
// level at start, with the fix; noeviction is not; a server whose CONFIG
// the ACL refuses is logged as unknown.
func TestCheckEvictionPolicy(t *testing.T) {
	lru := redistest.Start(t, "--maxmemory-policy", "allkeys-lru", "--maxmemory", "64mb")
	evs, logs := checkEviction(t, lru.URL())
	if len(evs) != 1 || evs[0].Policy != "allkeys-lru" || !evs[0].Unsafe() || evs[0].MaxMemory != 64<<20 {
		t.Errorf("allkeys-lru: CheckEviction = %+v", evs)
	}
	if !strings.Contains(logs, "level=ERROR") || !strings.Contains(logs, "set maxmemory-policy noeviction") ||
		!strings.Contains(logs, "maxmemory_policy=allkeys-lru") {
		t.Errorf("allkeys-lru: log lacks the loud warning:\n%s", logs)
	}

	volatile := redistest.Start(t, "--maxmemory-policy", "volatile-ttl")
	if evs, logs := checkEviction(t, volatile.URL()); len(evs) != 1 || !evs[0].Unsafe() || !strings.Contains(logs, "level=WARN") {
		t.Errorf("volatile-ttl without maxmemory: %+v\n%s", evs, logs)
	}

	safe := redistest.Start(t)
	if evs, logs := checkEviction(t, safe.URL()); len(evs) != 1 || evs[0].Policy != "noeviction" || evs[0].Unsafe() || logs != "" {
		t.Errorf("noeviction: %+v, log %q", evs, logs)
	}
	if err := safe.Client().Do(context.Background(), "ACL", "SETUSER", "slotd", "on", ">pw", "~*", "&*", "+@all", "-config").Err(); err != nil {
		t.Fatal(err)
	}
	url := strings.Replace(safe.URL(), "redis://", "redis://slotd:pw@", 1)
	evs, logs = checkEviction(t, url)
	if len(evs) != 1 || evs[0].Policy != "" || evs[0].Err == nil || !strings.Contains(logs, "cannot read Redis maxmemory-policy") {
		t.Errorf("CONFIG refused: %+v\n%s", evs, logs)
	}
	if strings.Contains(logs, "pw@") {
		t.Errorf("the log quotes the URL's password:\n%s", logs)
	}
}

// What the warning is about: under allkeys-lru, at maxmemory, Redis evicts
// done markers (and their attempt counters), and a completed slot is
// claimed — run — again.
func TestEvictionDropsSlotState(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory-policy", "allkeys-lru")
	rdb := srv.Client()
	ctx := context.Background()
	s := redislock.New(rdb, "slotd")
	defer s.Close()
	p := lock.Policy{Lease: 10 * time.Second, DoneTTL: time.Hour, MaxAttempts: 3}
	now := time.Now().Truncate(time.Second)
	const n = 50
	slots := make([]lock.Slot, n)
	for i := range slots {
		slots[i] = lock.Slot{Task: "t", ID: fmt.Sprint(i), Time: now.Add(-time.Minute), Deadline: now.Add(time.Hour)}
		c, err := s.Claim(ctx, slots[i], "r1", p)
		if err != nil || c.Result != lock.Won {
			t.Fatalf("claim %d: %+v %v", i, c, err)
		}
		if err := s.Complete(ctx, slots[i], lock.Owner{ID: "r1", Attempt: c.Attempt}, p.DoneTTL); err != nil {
			t.Fatal(err)
		}
	}
	used, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	var base int64
	for _, line := range strings.Split(used, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			fmt.Sscan(v, &base)
		}
	}
	if err := rdb.ConfigSet(ctx, "maxmemory", fmt.Sprint(base+(1<<20))).Err(); err != nil {
		t.Fatal(err)
	}
	filler := strings.Repeat("x", 10<<10)
	for i := range 1000 { // 10 MB through a 1 MB allowance
		if err := rdb.Set(ctx, fmt.Sprint("filler:", i), filler, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	rerun := 0
	for i := range slots {
		c, err := s.Claim(ctx, slots[i], "r2", p)
		if err != nil {
			t.Fatal(err)
		}
		if c.Result == lock.Won {
			rerun++
			if c.Attempt == 1 && rerun == 1 {
				t.Logf("slot %s: done marker and counter evicted; claimed again as attempt 1, token %d again", slots[i], lock.Token(slots[i].Time, 1))
			}
		}
	}
	t.Logf("%d of %d completed slots claimed again after eviction", rerun, n)
	if rerun == 0 {
		t.Errorf("no completed slot was evicted by allkeys-lru at maxmemory: the test shows nothing")
	}
}

// A Redis that loses its data (here: restarted without persistence; a
// FLUSHALL does the same) forgets that a slot is done and how many
// attempts it had: a replica that starts within the slot's window runs it
// again, as attempt 1 with the same fencing token as the first run.
func TestDataLossRerunsSlotWithSameToken(t *testing.T) {
	srv := redistest.Start(t)
	sched, err := schedule.Parse("@every 1h", "")
	if err != nil {
		t.Fatal(err)
	}
	runs := make(chan tasks.Run, 4)
	task := scheduler.Task{
		Name: "hourly", Spec: "@every 1h", Plugin: "test", Params: map[string]any{},
		Policy:  lock.Policy{Lease: 3 * time.Second, DoneTTL: 3 * time.Hour, MaxAttempts: 3},
		Timeout: time.Minute, Catchup: scheduler.CatchupLatest, Schedule: sched,
		Job: tasks.TaskFunc(func(ctx context.Context) error {
			r, _ := tasks.RunFrom(ctx)
			runs <- r
			return nil
		}),
	}
	daemon := func(replica string) tasks.Run {
		rdb := srv.Client()
		s := redislock.New(rdb, "slotd")
		defer s.Close()
		logs := &lockedBuffer{}
		d := scheduler.New([]scheduler.Task{task}, s, scheduler.WithReplica(replica),
			scheduler.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = d.Run(ctx)
		}()
		defer func() {
			cancel()
			<-done
		}()
		select {
		case r := <-runs:
			// Until the slot is marked done.
			deadline := time.Now().Add(5 * time.Second)
			for !strings.Contains(logs.String(), "attempt succeeded") {
				if time.Now().After(deadline) {
					t.Fatalf("%s: no success logged:\n%s", replica, logs.String())
				}
				time.Sleep(10 * time.Millisecond)
			}
			return r
		case <-time.After(10 * time.Second):
			t.Fatalf("%s ran nothing in 10s:\n%s", replica, logs.String())
			return tasks.Run{}
		}
	}
	first := daemon("r1")
	st, err := lock.ReadState(context.Background(), redislock.New(srv.Client(), "slotd"),
		lock.Slot{Task: "hourly", ID: first.Slot, Time: first.SlotTime, Deadline: first.SlotTime.Add(time.Hour)})
	if err != nil || st.Status != "done" {
		t.Fatalf("slot %s after the first run: %+v %v, want done", first.Slot, st, err)
	}
	srv.Restart() // no RDB, no AOF: the done marker and the counter are gone
	second := daemon("r2")
	if second.Slot != first.Slot || second.Token != first.Token || second.Attempt != 1 {
		t.Fatalf("after the data loss: slot %s attempt %d token %d; first run: slot %s attempt %d token %d",
			second.Slot, second.Attempt, second.Token, first.Slot, first.Attempt, first.Token)
	}
	t.Logf("slot %s ran twice, both as attempt 1 with fencing token %d", first.Slot, first.Token)
}
