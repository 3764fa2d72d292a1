package zklock_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/slotd/slotd/internal/zktest"
	"github.com/slotd/slotd/lock"
	zklock "github.com/slotd/slotd/lock/zklock"
)

// cutter is a dialer whose connections can all be cut, and new ones
// refused, until it is mended: a replica cut off from the ensemble.
type cutter struct {
	mu    sync.Mutex
	cut   bool
	conns []net.Conn
}

func (c *cutter) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cut {
		return nil, errors.New("cut off")
	}
	conn, err := net.DialTimeout(network, addr, timeout)
	if err == nil {
		c.conns = append(c.conns, conn)
	}
	return conn, err
}

func (c *cutter) set(cut bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cut = cut
	if cut {
		for _, conn := range c.conns {
			conn.Close()
		}
		c.conns = nil
	}
}

// A replica cut off from the ensemble has its task cancelled (its Lease's
// context) before its session expires and a peer's claim wins; the peer's
// fencing token is higher; and once mended, the cut-off replica's renewal
// is refused, its claim gone with its session.
func TestLostSessionCancelsBeforePeerWins(t *testing.T) {
	e := zktest.Start(t, 3)
	const timeout = time.Second
	var cut cutter
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := zklock.Dial(ctx, zklock.Options{Servers: e.Servers(), SessionTimeout: timeout, Root: "/slotd", Dialer: cut.dial})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b := dial(t, e, timeout, "/slotd")
	p := lock.Policy{Lease: timeout, DoneTTL: time.Hour, MaxAttempts: 3}
	now, err := a.Time(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slot := lock.Slot{Task: "payroll", ID: "1", Time: now.Add(-time.Second), Deadline: now.Add(time.Hour)}
	ca, err := a.Claim(ctx, slot, "a", p)
	if err != nil || ca.Result != lock.Won {
		t.Fatalf("a's claim = %+v, %v", ca, err)
	}
	lease := lock.Hold(ctx, a, slot, "a", ca, p.Lease, lock.LeaseHooks{})
	w := b.Watch(slot)
	defer w.Stop()

	time.Sleep(timeout) // a few renewals go through
	if lease.Context().Err() != nil {
		t.Fatalf("lease lost before the cut: %v", context.Cause(lease.Context()))
	}
	cutAt := time.Now()
	cut.set(true)
	var cancelledAt atomic.Pointer[time.Time]
	stop := context.AfterFunc(lease.Context(), func() { now := time.Now(); cancelledAt.Store(&now) })
	defer stop()

	var won lock.Claim
	for won.Result != lock.Won {
		c, err := b.Claim(ctx, slot, "b", p)
		if err != nil {
			t.Fatal(err)
		}
		won = c
		if c.Result == lock.Held {
			select {
			case <-w.C():
			case <-time.After(c.Wait):
			case <-ctx.Done():
				t.Fatal("b never won the slot")
			}
		}
	}
	wonAt := time.Now()
	var cancelled time.Time
	if at := cancelledAt.Load(); at != nil {
		cancelled = *at
	}
	if cancelled.IsZero() || !cancelled.Before(wonAt) {
		t.Fatalf("a's task cancelled at %v, b won at %v (after the cut): the task must stop first", cancelled.Sub(cutAt), wonAt.Sub(cutAt))
	}
	if !errors.Is(context.Cause(lease.Context()), lock.ErrLeaseLost) {
		t.Fatalf("a's lease ended with %v, want ErrLeaseLost", context.Cause(lease.Context()))
	}
	if lock.Token(slot.Time, won.Attempt) <= lease.Token() {
		t.Fatalf("b's token %d not above a's %d", lock.Token(slot.Time, won.Attempt), lease.Token())
	}
	t.Logf("cut at 0; a's task cancelled at %v; b won at %v (session timeout %v)", cancelled.Sub(cutAt), wonAt.Sub(cutAt), timeout)

	cut.set(false)
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := a.Renew(ctx, slot, lock.Owner{ID: "a", Attempt: ca.Attempt}, p.Lease)
		if errors.Is(err, lock.ErrNotHeld) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a's renewal after the cut: %v, want ErrNotHeld", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// b renews nothing here: its lease may have run out meanwhile, which
	// frees the slot; either way a's return changed nothing.
	st, err := lock.ReadState(ctx, a, slot)
	if err != nil || st.Attempts != 2 || (st.Status != "free" && (st.Status != "running" || st.Holder != "b")) {
		t.Fatalf("state = %+v, %v; want running by b (or free, b's lease run out), 2 attempts", st, err)
	}
}

// replyDropper is a dialer whose connection, once armed, turns deaf as a
// multi-op request goes out: the request is served, and the connection
// fails as its reply comes in, which the client never sees.
type replyDropper struct {
	armed atomic.Bool
}

func (d *replyDropper) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	conn, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	return &dropConn{Conn: conn, d: d}, nil
}

type dropConn struct {
	net.Conn
	d    *replyDropper
	deaf atomic.Bool
}

const opMulti = 14 // ZooKeeper's opcode, after the length and the xid

func (c *dropConn) Write(b []byte) (int, error) {
	if len(b) >= 12 && binary.BigEndian.Uint32(b[8:12]) == opMulti && c.d.armed.CompareAndSwap(true, false) {
		c.deaf.Store(true)
	}
	return c.Conn.Write(b)
}

func (c *dropConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if c.deaf.Load() {
		c.Conn.Close()
		return 0, errors.New("reply dropped")
	}
	return n, err
}

// A claim whose reply is lost after the ensemble committed it (the
// connection drops, as when the leader dies mid-request) is found again by
// the replica's next claim, on the same session: it wins with the attempt
// it counted, rather than finding the slot held, by its own run node, for
// as long as its session lives, and the slot lost.
func TestClaimWithLostReplyIsFoundAgain(t *testing.T) {
	e := zktest.Start(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var drop replyDropper
	a := dialWith(t, e, zklock.Options{Dialer: drop.dial})
	b := dialWith(t, e, zklock.Options{})
	p := shortLease
	slot := openSlot(ctx, t, a, "1")
	drop.armed.Store(true)
	if c, err := a.Claim(ctx, slot, "a", p); err == nil {
		t.Fatalf("claim whose reply was dropped = %+v, want an error", c)
	}
	c, err := a.Claim(ctx, slot, "a", p)
	if err != nil || c.Result != lock.Won || c.Attempt != 1 || c.Revision == 0 {
		t.Fatalf("claim after the lost reply = %+v, %v; want won, attempt 1, with the landed claim's revision", c, err)
	}
	if c, err := b.Claim(ctx, slot, "b", p); err != nil || c.Result != lock.Held || c.Holder != "a" {
		t.Fatalf("peer's claim = %+v, %v; want held by a", c, err)
	}
	if err := a.Complete(ctx, slot, lock.Owner{ID: "a", Attempt: 1}, p.DoneTTL); err != nil {
		t.Fatalf("completing the found claim: %v", err)
	}
	if c, err := b.Claim(ctx, slot, "b", p); err != nil || c.Result != lock.Done || c.Attempt != 1 {
		t.Fatalf("peer's claim after completion = %+v, %v; want done by attempt 1", c, err)
	}

	// A run node of a's own that was no claim in doubt (its attempt ran,
	// and the release's outcome was lost) is held, as anybody's would be:
	// its attempt number must not run twice.
	ran := openSlot(ctx, t, a, "2")
	if c, err := a.Claim(ctx, ran, "a", p); err != nil || c.Result != lock.Won {
		t.Fatalf("claim of a second slot = %+v, %v; want won", c, err)
	}
	if c, err := a.Claim(ctx, ran, "a", p); err != nil || c.Result != lock.Held || c.Holder != "a" || c.Attempt != 1 {
		t.Fatalf("claim of a slot whose run node a holds, not in doubt = %+v, %v; want held by a, attempt 1", c, err)
	}
}

// A claim in doubt whose take-over's reply is lost too stays in doubt:
// the next claim takes the run node up again, with the attempt it counted,
// rather than finding it held by itself, waiting its lease out and
// counting another attempt (found by the model: model/zk.pml, P6).
func TestClaimInDoubtSurvivesALostTakeOverReply(t *testing.T) {
	e := zktest.Start(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var drop replyDropper
	a := dialWith(t, e, zklock.Options{Dialer: drop.dial})
	p := shortLease
	slot := openSlot(ctx, t, a, "1")
	drop.armed.Store(true)
	if c, err := a.Claim(ctx, slot, "a", p); err == nil {
		t.Fatalf("claim whose reply was dropped = %+v, want an error", c)
	}
	drop.armed.Store(true)
	if c, err := a.Claim(ctx, slot, "a", p); err == nil {
		t.Fatalf("take-over whose reply was dropped = %+v, want an error", c)
	}
	// The client may still be dropping the deaf connection, failing the
	// requests it took meanwhile, or not yet connected again ("could not
	// connect to a server": once, on a loaded machine): those are lost
	// replies too, which the record in doubt survives as well, so claim
	// again as the engine would, each try a little after the last.
	c, err := a.Claim(ctx, slot, "a", p)
	for try := 0; (errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrNoServer)) && try < 50; try++ {
		t.Logf("claim after two lost replies, try %d: %v", try+1, err)
		time.Sleep(100 * time.Millisecond) // the client reconnects on its own; nothing to await
		c, err = a.Claim(ctx, slot, "a", p)
	}
	if err != nil || c.Result != lock.Won || c.Attempt != 1 {
		t.Fatalf("claim after two lost replies = %+v, %v; want won, attempt 1", c, err)
	}
}

// A claim whose lease exceeds the session timeout is refused: the session
// could expire, and a peer win, while the watchdog still let the task run.
func TestLeaseOverSessionRefused(t *testing.T) {
	e := zktest.Start(t, 1)
	s := dial(t, e, time.Second, "/slotd")
	now, err := s.Time(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	slot := lock.Slot{Task: "t", ID: "1", Time: now, Deadline: now.Add(time.Hour)}
	_, err = s.Claim(context.Background(), slot, "r", lock.Policy{Lease: 2 * time.Second, DoneTTL: time.Hour, MaxAttempts: 1})
	if !errors.Is(err, zklock.ErrLeaseOverSession) {
		t.Fatalf("claim with a lease over the session timeout: %v, want ErrLeaseOverSession", err)
	}
	// The servers cap the timeout (maxSessionTimeout, 60s in the tests):
	// what counts is the timeout they granted, not the one asked for.
	if got := dial(t, e, 5*time.Minute, "/slotd").SessionTimeout(); got != 600*zktest.Tick {
		t.Fatalf("granted session timeout = %v, want the servers' maximum %v", got, 600*zktest.Tick)
	}
}

// Slot nodes and their containers really expire: a done marker with a
// one-second TTL is gone, task node and all, soon after.
func TestNodesExpire(t *testing.T) {
	e := zktest.Start(t, 1)
	s := dial(t, e, time.Second, "/expiry")
	ctx := context.Background()
	now, err := s.Time(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slot := lock.Slot{Task: "t/x", ID: "1", Time: now, Deadline: now.Add(time.Hour)}
	p := lock.Policy{Lease: time.Second, DoneTTL: time.Second, MaxAttempts: 1}
	c, err := s.Claim(ctx, slot, "r", p)
	if err != nil || c.Result != lock.Won {
		t.Fatalf("claim = %+v, %v", c, err)
	}
	if err := s.Complete(ctx, slot, lock.Owner{ID: "r", Attempt: 1}, p.DoneTTL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		ok, _, err := s.Conn().Exists(s.TaskPath(slot.Task))
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the task's node still exists 10s after its only slot's 1s done TTL")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// The scenario that loses a done marker on Redis (a failover right after
// the completion, before a replica had it) on ZooKeeper: the leader is
// killed the moment Complete returns, and a peer, on another member, finds
// the slot done — every acknowledged write is on a quorum.
func TestDoneMarkerSurvivesLeaderKill(t *testing.T) {
	zktest.WithoutRace(t) // it kills the leader under watching sessions
	e := zktest.Start(t, 3)
	leader := e.WaitLeader(10 * time.Second)
	var others []string
	for _, m := range e.Members {
		if m != leader {
			others = append(others, m.Addr)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a, err := zklock.Dial(ctx, zklock.Options{Servers: []string{leader.Addr}, SessionTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := zklock.Dial(ctx, zklock.Options{Servers: others, SessionTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	p := lock.Policy{Lease: 10 * time.Second, DoneTTL: time.Hour, MaxAttempts: 3}
	now, err := a.Time(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		slot := lock.Slot{Task: "payroll", ID: fmt.Sprint(i), Time: now.Add(-time.Second), Deadline: now.Add(time.Hour)}
		c, err := a.Claim(ctx, slot, "a", p)
		if err != nil || c.Result != lock.Won {
			t.Fatalf("claim %d = %+v, %v", i, c, err)
		}
		if err := a.Complete(ctx, slot, lock.Owner{ID: "a", Attempt: c.Attempt}, p.DoneTTL); err != nil {
			t.Fatal(err)
		}
	}
	leader.Stop() // right after the last acknowledged completion
	for i := range 20 {
		slot := lock.Slot{Task: "payroll", ID: fmt.Sprint(i), Time: now.Add(-time.Second), Deadline: now.Add(time.Hour)}
		var c lock.Claim
		for {
			if c, err = b.Claim(ctx, slot, "b", p); err == nil {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("claim %d after the leader's death: %v", i, err)
			}
			time.Sleep(100 * time.Millisecond) // the election
		}
		if c.Result != lock.Done || c.Holder != "a" {
			t.Fatalf("slot %d after the leader died: %+v, want done by a", i, c)
		}
	}
}

// A release that failed before it reached the ensemble leaves the run node
// of a live session: the slot is held by it, for peers too, beyond any
// lease. The replica's next claim of the slot deletes it first and claims
// the next attempt, as it would after a release.
func TestFailedReleaseFreedByNextClaim(t *testing.T) {
	e := zktest.Start(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, b := dialWith(t, e, zklock.Options{}), dialWith(t, e, zklock.Options{})
	p := shortLease
	slot := openSlot(ctx, t, a, "1")
	if c, err := a.Claim(ctx, slot, "a", p); err != nil || c.Result != lock.Won {
		t.Fatalf("claim = %+v, %v; want won", c, err)
	}
	gone, stop := context.WithCancel(ctx)
	stop()
	if err := a.Release(gone, slot, lock.Owner{ID: "a", Attempt: 1}); err == nil {
		t.Fatal("release with its context ended: no error")
	}
	if c, err := b.Claim(ctx, slot, "b", p); err != nil || c.Result != lock.Held || c.Holder != "a" {
		t.Fatalf("peer's claim after the failed release = %+v, %v; want held by a", c, err)
	}
	c, err := a.Claim(ctx, slot, "a", p)
	if err != nil || c.Result != lock.Won || c.Attempt != 2 {
		t.Fatalf("a's next claim = %+v, %v; want won, attempt 2", c, err)
	}
}

// The tests that kill a member under watching sessions, built without the
// race detector when the package is built with it (zktest.WithoutRace
// says why); without it they run where they stand.
func TestZooKeeperKillsWithoutRace(t *testing.T) {
	zktest.RunWithoutRace(t, `^(TestDoneMarkerSurvivesLeaderKill|TestCompletionOutlastsQuorumLoss)$`)
}
