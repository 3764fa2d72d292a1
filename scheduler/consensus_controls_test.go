package scheduler_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/slotd/slotd/internal/etcdtest"
	"github.com/slotd/slotd/internal/testlane"
	"github.com/slotd/slotd/internal/zktest"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/etcdlock"
	zklock "github.com/slotd/slotd/lock/zklock"
	"github.com/slotd/slotd/scheduler"
	"github.com/slotd/slotd/tasks"
)

// consensus is n stores on a three-member etcd cluster or ZooKeeper
// ensemble, or on three Redlock masters, with what the controls tests do
// to them.
type consensus struct {
	stores []lock.Store
	// crash cuts store i off the cluster at once, as a kill -9 of its
	// process: nothing it held is released or renewed after.
	crash []func()
	// stopLeader kills the member that leads now; the returned func
	// starts it again. Nil on a shared cluster (consensusStores).
	stopLeader func() (restart func())
}

// consensusStores is n stores of kind for a test that does nothing to
// the cluster's members: on etcd and ZooKeeper they share the package's
// cluster (etcdtest.Shared, zktest.Shared), under a prefix of the
// test's own; on Redlock, three masters of its own. Each ZooKeeper
// ensemble of its own cost about 2 CPU-seconds and 1.5 s of a serial or
// heavy-lane test's time to start; fourteen tests started one.
func consensusStores(t *testing.T, kind string, n int) consensus {
	t.Helper()
	switch kind {
	case "etcd":
		return etcdConsensus(t, etcdtest.Shared(t, 3), sharedPrefix(), n)
	case "zookeeper":
		return zkConsensus(t, zktest.Shared(t, 3), "/"+sharedPrefix(), n)
	}
	return redlockConsensus(t, n)
}

// killableStores is consensusStores on a cluster of the test's own, whose
// leader the test may kill (stopLeader).
func killableStores(t *testing.T, kind string, n int) consensus {
	t.Helper()
	switch kind {
	case "etcd":
		cl := etcdtest.Start(t, 3)
		c := etcdConsensus(t, cl.Endpoints(), "slotd", n)
		c.stopLeader = func() func() {
			m := cl.Leader()
			m.Stop()
			return m.Restart
		}
		return c
	case "zookeeper":
		e := zktest.Start(t, 3)
		// The stores talk to the followers. The leader killed, they still
		// drop their clients while they elect a new one, and the sessions
		// reconnect: the tests that kill it run without -race
		// (zktest.WithoutRace: go-zookeeper's own reconnect race).
		leader := e.WaitLeader(10 * time.Second)
		if leader == nil {
			t.Fatal("no ZooKeeper leader")
		}
		var followers []string
		for _, m := range e.Members {
			if m != leader {
				followers = append(followers, m.Addr)
			}
		}
		c := zkConsensus(t, followers, "/slotd", n)
		c.stopLeader = func() func() {
			leader.Stop() // the leader at the start: no store talks to it
			return leader.Start
		}
		return c
	}
	return redlockConsensus(t, n)
}

// sharedPrefixes numbers the prefixes of the tests on shared clusters.
var sharedPrefixes atomic.Int64

// sharedPrefix is a key prefix (a ZooKeeper root without its slash) no
// other test of the package uses.
func sharedPrefix() string { return fmt.Sprintf("slotd%d", sharedPrefixes.Add(1)) }

// etcdConsensus is n stores under prefix on the etcd members at endpoints,
// each on a client of its own.
func etcdConsensus(t *testing.T, endpoints []string, prefix string, n int) consensus {
	t.Helper()
	var c consensus
	for range n {
		cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		s := etcdlock.New(cli, prefix)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = s.Subscribe(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close(); cli.Close() })
		c.stores = append(c.stores, s)
		c.crash = append(c.crash, func() { cli.Close() })
	}
	return c
}

// zkConsensus is n stores (sessions) under root on the ZooKeeper members
// at servers.
func zkConsensus(t *testing.T, servers []string, root string, n int) consensus {
	t.Helper()
	var c consensus
	for range n {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		s, err := zklock.Dial(ctx, zklock.Options{Servers: servers, Root: root, SessionTimeout: 10 * time.Second})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		c.stores = append(c.stores, s)
		c.crash = append(c.crash, func() { s.Close() })
	}
	return c
}

var consensusKinds = []string{"etcd", "zookeeper", "redlock"}

// triggerRetrying sends a trigger with key through c until the store
// answers (a member may be down, a leader being elected): the key makes
// a request that landed before its answer was lost answer Repeated.
func triggerRetrying(t *testing.T, c lock.Controls, task, key string, window time.Duration) lock.Trigger {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		tr, err := c.Trigger(ctx, task, key, window)
		cancel()
		if err == nil {
			return tr
		}
		if time.Now().After(deadline) {
			t.Fatalf("trigger %s key %s: %v", task, key, err)
		}
		t.Logf("trigger %s key %s: %v; again", task, key, err)
		time.Sleep(200 * time.Millisecond)
	}
}

// On etcd, ZooKeeper and Redlock (3 masters), a trigger runs once fleet-wide across three
// replicas; its key repeated by every replica starts nothing; a trigger
// sent while the cluster's leader is killed runs once too.
func TestConsensusTriggerRunsOnceFleetWide(t *testing.T) {
	testlane.Parallel(t, heavyLane)
	for _, kind := range consensusKinds {
		t.Run(kind, func(t *testing.T) {
			if kind == "zookeeper" {
				zktest.WithoutRace(t) // it kills the leader under watching sessions
			}
			c := killableStores(t, kind, 3)
			l := newLedger()
			task := testTask(t, "report", "0 0 1 1 *", l.job(ok), func(t *scheduler.Task) { t.Deadline = 10 * time.Minute })
			for i, s := range c.stores {
				startReplica(t, fmt.Sprintf("r%d", i), s, time.Second, []scheduler.Task{task}, scheduler.WithClockCheck(200*time.Millisecond))
			}
			ctx := context.Background()
			first := triggerRetrying(t, controls(t, c.stores[0]), task.Name, "deploy-1", task.Window())
			if first.Result != lock.Started {
				t.Fatalf("trigger = %+v", first)
			}
			slot := task.TriggerSlot(first.Time)
			rs := l.await(t, "the triggered run", 20*time.Second, func(rs []record) bool { return len(rs) == 1 && rs[0].done })
			if r := rs[0].run; r.Slot != slot.ID || r.Attempt != 1 || r.Token != lock.Token(slot.Time, lock.TriggerBase+1) {
				t.Fatalf("triggered run %+v, want slot %s attempt 1, token %d", r, slot.ID, lock.Token(slot.Time, lock.TriggerBase+1))
			}
			var wg sync.WaitGroup
			for _, s := range c.stores {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if again, err := controls(t, s).Trigger(ctx, task.Name, "deploy-1", task.Window()); err != nil || again.Result != lock.Repeated {
						t.Errorf("repeated trigger = %+v, %v", again, err)
					}
				}()
			}
			wg.Wait()
			await(t, "the store's clock past the first trigger's second", 5*time.Second, func() bool {
				now, err := c.stores[1].Time(ctx)
				return err == nil && now.Truncate(time.Second).After(first.Time)
			})
			// The leader killed, a new key: one run, on whichever replica.
			restart := c.stopLeader()
			second := triggerRetrying(t, controls(t, c.stores[1]), task.Name, "deploy-2", task.Window())
			if second.Result == lock.Coalesced || second.Time.Equal(first.Time) {
				t.Fatalf("second trigger = %+v, want a new one", second)
			}
			l.await(t, "the run triggered with the leader down", 30*time.Second, func(rs []record) bool { return len(rs) == 2 && rs[1].done })
			restart()
			for _, at := range []time.Time{first.Time, second.Time} {
				var st lock.State
				await(t, fmt.Sprintf("trigger at %v marked done", at), 20*time.Second, func() bool {
					st, _ = lock.ReadState(ctx, c.stores[2], task.TriggerSlot(at))
					return st.Status == "done"
				})
				if st.Attempts != lock.TriggerBase+1 {
					t.Errorf("trigger at %v: state %+v; want done after one attempt", at, st)
				}
			}
			if rs := l.snapshot(); len(rs) != 2 || rs[1].run.Slot != task.TriggerSlot(second.Time).ID {
				t.Fatalf("runs, want one per trigger:\n%s", dump(rs))
			}
		})
	}
}

// On etcd, ZooKeeper and Redlock (3 masters), forbid holds after the running slot's holder is
// cut off as by kill -9 (three replicas): its record stays until its
// lease runs out, while the others skip their slots; then a slot runs
// again, never beside the first.
func TestConsensusForbidAfterHolderKilled(t *testing.T) {
	testlane.Parallel(t, heavyLane)
	for _, kind := range consensusKinds {
		t.Run(kind, func(t *testing.T) {
			c := consensusStores(t, kind, 3)
			l := newLedger()
			var mu sync.Mutex
			var firstEnded time.Time
			var once sync.Once
			job := l.job(func(ctx context.Context, _ tasks.Run) error {
				first := false
				once.Do(func() { first = true })
				if !first {
					return nil
				}
				<-ctx.Done() // runs until its holder loses its lease (or the test ends)
				mu.Lock()
				firstEnded = time.Now()
				mu.Unlock()
				return ctx.Err()
			})
			task := testTask(t, "tick", "@every 1s", job, func(t *scheduler.Task) {
				t.Concurrency = scheduler.ConcurrencyForbid
				t.Policy.MaxAttempts = 1
			})
			var reps []*replica
			for i, s := range c.stores {
				reps = append(reps, startReplica(t, fmt.Sprintf("r%d", i), s, time.Second, []scheduler.Task{task}))
			}
			rs := l.await(t, "the long run", 20*time.Second, func(rs []record) bool { return len(rs) == 1 })
			holder := -1
			for i, r := range reps {
				if r.name == rs[0].run.Replica {
					holder = i
				}
			}
			if holder < 0 {
				t.Fatalf("run on unknown replica %q", rs[0].run.Replica)
			}
			skippedBefore := uint64(0)
			for i, r := range reps {
				if i != holder {
					skippedBefore += r.sched.Stats().Task(task.Name).Skipped[1].Load()
				}
			}
			killed := time.Now()
			c.crash[holder]()
			rs = l.await(t, "a run after the holder's record expired", 30*time.Second, func(rs []record) bool { return len(rs) >= 2 })
			mu.Lock()
			ended := firstEnded
			mu.Unlock()
			if ended.IsZero() || rs[1].started.Before(ended) {
				t.Fatalf("slot %s started at %v beside the killed holder's run (ended %v):\n%s", rs[1].run.Slot, rs[1].started, ended, dump(rs))
			}
			if rs[1].run.Replica == reps[holder].name {
				t.Fatalf("the killed replica ran again:\n%s", dump(rs))
			}
			skipped := uint64(0)
			for i, r := range reps {
				if i != holder {
					skipped += r.sched.Stats().Task(task.Name).Skipped[1].Load()
				}
			}
			if skipped <= skippedBefore {
				t.Errorf("no slot skipped (forbid) while the killed holder's record lived")
			}
			t.Logf("%s: next run %v after the kill; %d slots skipped meanwhile", kind, rs[1].started.Sub(killed).Round(time.Millisecond), skipped-skippedBefore)
		})
	}
}

// On etcd, ZooKeeper and Redlock (3 masters), forbid holds through a kill of the cluster's
// leader during the running slot (three replicas): no slot runs beside
// it, and slots run again after it ends.
func TestConsensusForbidThroughLeaderKill(t *testing.T) {
	testlane.Parallel(t, heavyLane)
	for _, kind := range consensusKinds {
		t.Run(kind, func(t *testing.T) {
			if kind == "zookeeper" {
				zktest.WithoutRace(t) // it kills the leader under watching sessions
			}
			c := killableStores(t, kind, 3)
			l := newLedger()
			release := make(chan struct{})
			var mu sync.Mutex
			var firstEnded time.Time
			var once sync.Once
			job := l.job(func(ctx context.Context, _ tasks.Run) error {
				first := false
				once.Do(func() { first = true })
				if !first {
					return nil
				}
				select {
				case <-release:
				case <-ctx.Done(): // its lease lost in the election, or the test ended
				}
				mu.Lock()
				firstEnded = time.Now()
				mu.Unlock()
				return nil
			})
			task := testTask(t, "tick", "@every 1s", job, func(t *scheduler.Task) {
				t.Concurrency = scheduler.ConcurrencyForbid
				t.Policy.MaxAttempts = 1
			})
			var reps []*replica
			for i, s := range c.stores {
				reps = append(reps, startReplica(t, fmt.Sprintf("r%d", i), s, time.Second, []scheduler.Task{task}))
			}
			unblock := sync.OnceFunc(func() { close(release) })
			t.Cleanup(unblock)
			l.await(t, "the long run", 20*time.Second, func(rs []record) bool { return len(rs) == 1 })
			skippedSum := func() uint64 {
				var n uint64
				for _, r := range reps {
					n += r.sched.Stats().Task(task.Name).Skipped[1].Load()
				}
				return n
			}
			before := skippedSum()
			restart := c.stopLeader()
			await(t, "slots skipped (forbid) with the leader down", 30*time.Second, func() bool { return skippedSum() >= before+2 })
			restart()
			unblock()
			rs := l.await(t, "runs after the long one", 30*time.Second, func(rs []record) bool { return len(rs) >= 3 })
			mu.Lock()
			ended := firstEnded
			mu.Unlock()
			if ended.IsZero() || rs[1].started.Before(ended) {
				t.Fatalf("slot %s started at %v beside the long run (ended %v):\n%s", rs[1].run.Slot, rs[1].started, ended, dump(rs))
			}
			t.Logf("%s: %d slots skipped while the long run held", kind, skippedSum()-before)
		})
	}
}

// On etcd, ZooKeeper and Redlock (3 masters), a pause stops claims on every replica (three),
// holds across a restart of them all, and a resume runs the next slot.
func TestConsensusPauseHoldsAcrossRestart(t *testing.T) {
	testlane.Parallel(t, heavyLane)
	for _, kind := range consensusKinds {
		t.Run(kind, func(t *testing.T) { pauseHoldsAcrossRestart(t, consensusStores(t, kind, 3).stores) })
	}
}

// The ZooKeeper tests that kill or stop members under watching sessions,
// built without the race detector when the package is built with it
// (zktest.WithoutRace says why); without it they run where they stand.
func TestZooKeeperKillsWithoutRace(t *testing.T) {
	testlane.Parallel(t, heavyLane)
	zktest.RunWithoutRace(t, `^(TestConsensusTriggerRunsOnceFleetWide|TestConsensusForbidThroughLeaderKill|TestZooKeeperReadinessFollowsQuorumLoss)$/^zookeeper$`)
}
