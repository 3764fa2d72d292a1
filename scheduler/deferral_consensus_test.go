package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/etcdlock"
	zklock "github.com/slotd/slotd/lock/zklock"
	"github.com/slotd/slotd/scheduler"
	"github.com/slotd/slotd/tasks"
)

// batched fails t unless every store reports every release to one
// function and peeks: the replicas that defer keep a list, not a run per
// slot (scheduler/deferral.go).
func batched(t *testing.T, stores []lock.Store) {
	t.Helper()
	for _, s := range stores {
		if _, ok := s.(lock.Peeker); !ok {
			t.Fatalf("%T is no lock.Peeker", s)
		}
	}
}

// deferredHandoff starts three replicas on stores, and once each sees
// the others live, a task due every second whose first attempt of each
// slot fails on its preferred claimant. The replica that failed waits a
// minute before it claims again (WithHandoff), and its peers, which
// listed the slot and read it held under a 10 s lease, past the slot's
// one-second window, would not look again: each second attempt that starts
// on a peer was started by the release notice. It logs the handoffs'
// median (first attempt's failure to the second's start): on a consensus
// store two quorum writes at least (the release, the peer's claim), each
// a WAL fsync on this machine's shared disk for etcd.
func deferredHandoff(t *testing.T, stores []lock.Store) {
	batched(t, stores)
	led := newLedger()
	const n = 8
	fail := errors.New("the first attempt fails")
	task := testTask(t, "handoff", "@every 1s", led.job(func(_ context.Context, r tasks.Run) error {
		if r.Attempt == 1 {
			return fail
		}
		return nil
	}), func(t *scheduler.Task) { t.Lease = 10 * time.Second })
	reloadAll(t, seeingReplicas(t, stores, scheduler.WithHandoff(time.Minute)), []scheduler.Task{task})
	rs := led.await(t, "n slots' second attempts to succeed", 60*time.Second, func(rs []record) bool {
		ok := 0
		for _, r := range rs {
			if r.done && r.err == nil && r.run.Attempt == 2 {
				ok++
			}
		}
		return ok >= n
	})
	var handoffs []time.Duration
	for slot, runs := range bySlot(rs) {
		if len(runs) != 2 || runs[0].run.Attempt != 1 || runs[1].run.Attempt != 2 {
			continue // the last slot, under way; or one fired as the replicas reloaded
		}
		first, second := runs[0], runs[1]
		if second.run.Replica == first.run.Replica {
			t.Errorf("slot %s: attempt 2 on %s, the replica that failed (it waits a minute): want a peer", slot, first.run.Replica)
		}
		handoffs = append(handoffs, second.started.Sub(first.started)) // the first fails as it starts
	}
	if len(handoffs) < n/2 {
		t.Fatalf("%d slots ran attempts 1 and 2 alone, want at least %d", len(handoffs), n/2)
	}
	slices.Sort(handoffs)
	p50 := handoffs[len(handoffs)/2]
	t.Logf("failure handoff on a peer: p50 %v, max %v (%d slots)", p50, handoffs[len(handoffs)-1], len(handoffs))
	if p50 > 500*time.Millisecond {
		t.Errorf("failure handoff p50 %v, want within half the slot's window (the release notice)", p50)
	}
}

// deferredTakeover starts three replicas on stores, due one slot with
// lease. As attempt 1 starts on its preferred claimant, stall(i) stops
// that replica (i: its index in stores) as its store sees it — no renewal,
// no release, no completion — and its task hangs. Its peers listed the
// slot and read it held: attempt 2 must start on one of them within lease
// plus bound of attempt 1's start (its claim, which its lease counts
// from, came before).
func deferredTakeover(t *testing.T, stores []lock.Store, lease, bound time.Duration, stall func(i int)) {
	batched(t, stores)
	led := newLedger()
	task := testTask(t, "takeover", later(5*time.Second), led.job(func(ctx context.Context, r tasks.Run) error {
		if r.Attempt > 1 {
			return nil
		}
		i, err := strconv.Atoi(strings.TrimPrefix(r.Replica, "r"))
		if err != nil {
			return err
		}
		stall(i - 1)
		<-ctx.Done() // the lease lost, or the test's end
		return context.Cause(ctx)
	}), func(t *scheduler.Task) { t.Lease = lease })
	for i, s := range stores {
		startReplica(t, fmt.Sprintf("r%d", i+1), s, time.Second, []scheduler.Task{task}, scheduler.WithClockCheck(200*time.Millisecond))
	}
	rs := led.await(t, "attempt 2", 60*time.Second, func(rs []record) bool {
		for _, r := range rs {
			if r.run.Attempt == 2 {
				return true
			}
		}
		return false
	})
	var first, second record
	for _, r := range rs {
		switch r.run.Attempt {
		case 1:
			first = r
		case 2:
			second = r
		}
	}
	if first.run.Replica == "" || second.run.Replica == first.run.Replica {
		t.Fatalf("attempt 1 on %q, attempt 2 on %q: want a peer to take over", first.run.Replica, second.run.Replica)
	}
	took := second.started.Sub(first.started)
	t.Logf("taken over by %s %v after attempt 1 started on %s (lease %v)", second.run.Replica, took, first.run.Replica, lease)
	if took > lease+bound {
		t.Errorf("attempt 2 started %v after attempt 1, want within lease %v + %v", took, lease, bound)
	}
}

// etcdStalled and zkStalled are consensus stores whose claims and writes
// of held slots a test can stop, as a frozen process's stop (SIGSTOP):
// the store sees no claim, renewal or release from it, while its session
// lives on. They keep every capability of the store they embed.

// stall blocks until ctx ends if frozen is set.
func stall(ctx context.Context, frozen *atomic.Bool) error {
	if !frozen.Load() {
		return nil
	}
	<-ctx.Done()
	return context.Cause(ctx)
}

type etcdStalled struct {
	*etcdlock.Store
	frozen *atomic.Bool
}

func (s etcdStalled) Renew(ctx context.Context, slot lock.Slot, o lock.Owner, d time.Duration) error {
	if err := stall(ctx, s.frozen); err != nil {
		return err
	}
	return s.Store.Renew(ctx, slot, o, d)
}

func (s etcdStalled) Claim(ctx context.Context, slot lock.Slot, replica string, p lock.Policy) (lock.Claim, error) {
	if err := stall(ctx, s.frozen); err != nil {
		return lock.Claim{}, err
	}
	return s.Store.Claim(ctx, slot, replica, p)
}

func (s etcdStalled) ClaimMany(ctx context.Context, reqs []lock.ClaimRequest, f func(int, lock.ClaimReply)) {
	if err := stall(ctx, s.frozen); err != nil {
		for i := range reqs {
			f(i, lock.ClaimReply{Err: err})
		}
		return
	}
	s.Store.ClaimMany(ctx, reqs, f)
}

func (s etcdStalled) Release(ctx context.Context, slot lock.Slot, o lock.Owner) error {
	if err := stall(ctx, s.frozen); err != nil {
		return err
	}
	return s.Store.Release(ctx, slot, o)
}

type zkStalled struct {
	*zklock.Store
	frozen *atomic.Bool
}

func (s zkStalled) Renew(ctx context.Context, slot lock.Slot, o lock.Owner, d time.Duration) error {
	if err := stall(ctx, s.frozen); err != nil {
		return err
	}
	return s.Store.Renew(ctx, slot, o, d)
}

func (s zkStalled) Claim(ctx context.Context, slot lock.Slot, replica string, p lock.Policy) (lock.Claim, error) {
	if err := stall(ctx, s.frozen); err != nil {
		return lock.Claim{}, err
	}
	return s.Store.Claim(ctx, slot, replica, p)
}

func (s zkStalled) ClaimMany(ctx context.Context, reqs []lock.ClaimRequest, f func(int, lock.ClaimReply)) {
	if err := stall(ctx, s.frozen); err != nil {
		for i := range reqs {
			f(i, lock.ClaimReply{Err: err})
		}
		return
	}
	s.Store.ClaimMany(ctx, reqs, f)
}

func (s zkStalled) Release(ctx context.Context, slot lock.Slot, o lock.Owner) error {
	if err := stall(ctx, s.frozen); err != nil {
		return err
	}
	return s.Store.Release(ctx, slot, o)
}

// stallables wraps c's stores; the returned func freezes store i.
func stallables(t *testing.T, kind string, c consensus) ([]lock.Store, func(i int)) {
	frozen := make([]*atomic.Bool, len(c.stores))
	var out []lock.Store
	for i, s := range c.stores {
		frozen[i] = new(atomic.Bool)
		switch kind {
		case "etcd":
			out = append(out, etcdStalled{s.(*etcdlock.Store), frozen[i]})
		case "zookeeper":
			out = append(out, zkStalled{s.(*zklock.Store), frozen[i]})
		default:
			t.Fatalf("no stallable %s store", kind)
		}
	}
	return out, func(i int) { frozen[i].Store(true) }
}

// takeoverBound is how late past the lease a peer may take over a dead or
// frozen holder's slot on each store, with a loaded -race run's margin.
// etcd's leader revokes the leases that ran out every half second (its
// lessor's check), and a lease counts in whole seconds; ZooKeeper's
// peers judge the run node's lease by the leader's clock, so a read when
// it ends finds it free.
var takeoverBound = map[string]time.Duration{"etcd": 800 * time.Millisecond, "zookeeper": 300 * time.Millisecond}

// On etcd and ZooKeeper, a failed attempt of a slot that the other two
// replicas left to its preferred claimant is retried by one of them at
// once: they hear its release notice (lock.Peeker), with no watch
// of their own on the slot.
func TestConsensusDeferredHandoff(t *testing.T) {
	for _, kind := range []string{"etcd", "zookeeper"} {
		t.Run(kind, func(t *testing.T) {
			deferredHandoff(t, consensusStores(t, kind, 3).stores)
		})
	}
}

// On etcd and ZooKeeper, the slot of a preferred claimant that was killed
// (etcd: its client closed, its lease left to run out; ZooKeeper: its
// session closed, which deletes its run node with no release notice) or
// froze (its renewals stop, its session lives) is taken over by a peer
// that listed it, when the lease it read ends.
func TestConsensusDeferredTakeover(t *testing.T) {
	const lease = 2 * time.Second // etcd's unit is the second
	for _, kind := range []string{"etcd", "zookeeper"} {
		t.Run(kind+"/killed", func(t *testing.T) {
			c := consensusStores(t, kind, 3)
			deferredTakeover(t, c.stores, lease, takeoverBound[kind], func(i int) { c.crash[i]() })
		})
		t.Run(kind+"/frozen", func(t *testing.T) {
			stores, freeze := stallables(t, kind, consensusStores(t, kind, 3))
			deferredTakeover(t, stores, lease, takeoverBound[kind], freeze)
		})
	}
}
