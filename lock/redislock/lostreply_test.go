package redislock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/redislock"
)

// errReplyLost is what loseReply answers in place of Redis's reply.
var errReplyLost = errors.New("test: connection reset after the command was sent")

// loseReply is a hook that, while armed, lets the next armed commands
// reach Redis and run there, then answers them with errReplyLost: a
// reply lost after Redis ran the command (a connection reset, a context
// that ended in flight).
//
// With resend it sends the command again instead, as go-redis does after
// a network error (MaxRetries), and answers that one's reply.
type loseReply struct {
	armed  atomic.Int32
	resend bool
}

func (l *loseReply) DialHook(next redis.DialHook) redis.DialHook { return next }

func (l *loseReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := next(ctx, cmd); err != nil || !l.take(cmd) {
			return err
		}
		if l.resend {
			return next(ctx, cmd)
		}
		cmd.SetErr(errReplyLost)
		return errReplyLost
	}
}

func (l *loseReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if err := next(ctx, cmds); err != nil || !l.take(cmds...) {
			return err
		}
		if l.resend {
			return next(ctx, cmds)
		}
		for _, c := range cmds {
			c.SetErr(errReplyLost)
		}
		return errReplyLost
	}
}

// take reports whether cmds carry a script call and the hook is armed for
// one more, disarming it by one.
func (l *loseReply) take(cmds ...redis.Cmder) bool {
	for _, c := range cmds {
		if name := c.Name(); name == "evalsha" || name == "eval" {
			for {
				n := l.armed.Load()
				if n <= 0 {
					return false
				}
				if l.armed.CompareAndSwap(n, n-1) {
					return true
				}
			}
		}
	}
	return false
}

// lossyClient is a client of srv whose replies loseReply may drop.
func lossyClient(t *testing.T, srv *redistest.Server, l *loseReply) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	rdb.AddHook(l)
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

func lostReplySlot(now time.Time) lock.Slot {
	return lock.Slot{Task: "lost", ID: "1", Time: now.Add(-time.Second), Deadline: now.Add(time.Hour)}
}

// A claim whose reply is lost (a hook drops it after Redis ran the
// script) costs no attempt, on Claim and on ClaimMany: with max_attempts =
// 1 the claimant's retry wins the slot as attempt 1 (its own claim, taken over,
// with its lease set anew), runs it once and completes it; the counter
// reads 1 and a peer finds the slot done.
func TestLostReplyHookCostsNoAttempt(t *testing.T) {
	for _, many := range []bool{false, true} {
		name := "Claim"
		if many {
			name = "ClaimMany"
		}
		t.Run(name, func(t *testing.T) {
			srv := redistest.Start(t)
			l := &loseReply{}
			r := redislock.New(lossyClient(t, srv, l), "slotd")
			defer r.Close()
			ctx := context.Background()
			slot := lostReplySlot(time.Now())
			p := lock.Policy{Lease: 30 * time.Second, DoneTTL: time.Hour, MaxAttempts: 1}
			claim := func() (lock.Claim, error) {
				if !many {
					return r.Claim(ctx, slot, "a#1", p)
				}
				var rep lock.ClaimReply
				r.ClaimMany(ctx, []lock.ClaimRequest{{Slot: slot, Owner: "a#1", Policy: p}}, func(_ int, cr lock.ClaimReply) { rep = cr })
				return rep.Claim, rep.Err
			}

			l.armed.Store(1)
			if c, err := claim(); !errors.Is(err, errReplyLost) {
				t.Fatalf("claim with its reply lost = %+v, %v; want %v", c, err, errReplyLost)
			}
			state, attempts := redislock.Keys("slotd", slot)
			rdb := srv.Client()
			if v := rdb.Get(ctx, state).Val(); v != "run:a#1:1" {
				t.Fatalf("state after the lost reply = %q; want the claim landed (run:a#1:1)", v)
			}
			// Let the lease run down a little, to see the take-over set it anew.
			if err := rdb.PExpire(ctx, state, 5*time.Second).Err(); err != nil {
				t.Fatal(err)
			}
			c, err := claim()
			if err != nil || c.Result != lock.Won || c.Attempt != 1 {
				t.Fatalf("retried claim = %+v, %v; want won as attempt 1 (its own claim)", c, err)
			}
			if ttl := rdb.PTTL(ctx, state).Val(); ttl <= 5*time.Second {
				t.Errorf("lease after the take-over = %v; want it set anew to about %v", ttl, p.Lease)
			}
			if n := rdb.Get(ctx, attempts).Val(); n != "1" {
				t.Errorf("attempts after the take-over = %q; want 1", n)
			}
			// The holder claiming again (no reply lost) takes nothing over.
			if c, err := claim(); err != nil || c.Result != lock.Held || c.Holder != "a" {
				t.Errorf("claim by the holder itself = %+v, %v; want held", c, err)
			}
			if err := r.Complete(ctx, slot, lock.Owner{ID: "a#1", Attempt: 1}, p.DoneTTL); err != nil {
				t.Fatal(err)
			}
			if c, err := r.Claim(ctx, slot, "b#1", p); err != nil || c.Result != lock.Done || c.Attempt != 1 {
				t.Errorf("peer's claim after completion = %+v, %v; want done by attempt 1", c, err)
			}
		})
	}
}

// A claim in doubt takes over only its own claim: another owner's run
// (a peer that won once the first lease ran out) answers held, and a peer
// in doubt itself does not take over the first owner's claim.
func TestLostClaimReplyTakesOverOnlyItsOwn(t *testing.T) {
	srv := redistest.Start(t)
	la, lb := &loseReply{}, &loseReply{}
	a := redislock.New(lossyClient(t, srv, la), "slotd")
	defer a.Close()
	b := redislock.New(lossyClient(t, srv, lb), "slotd")
	defer b.Close()
	ctx := context.Background()
	slot := lostReplySlot(time.Now())
	p := lock.Policy{Lease: 30 * time.Second, DoneTTL: time.Hour, MaxAttempts: 3}
	rdb := srv.Client()
	state, _ := redislock.Keys("slotd", slot)

	la.armed.Store(1)
	if _, err := a.Claim(ctx, slot, "a#1", p); !errors.Is(err, errReplyLost) {
		t.Fatalf("a's claim: %v; want its reply lost", err)
	}
	lb.armed.Store(1)
	if _, err := b.Claim(ctx, slot, "b#1", p); !errors.Is(err, errReplyLost) {
		t.Fatalf("b's claim: %v; want its reply lost", err)
	}
	// b is in doubt too, but the run is a's: b's retry answers held.
	if c, err := b.Claim(ctx, slot, "b#1", p); err != nil || c.Result != lock.Held || c.Holder != "a" || c.Attempt != 1 {
		t.Fatalf("b's retry = %+v, %v; want held by a, attempt 1", c, err)
	}
	// a's lost claim runs out; b wins attempt 2; a's retry finds b's run.
	if err := rdb.Del(ctx, state).Err(); err != nil {
		t.Fatal(err)
	}
	if c, err := b.Claim(ctx, slot, "b#1", p); err != nil || c.Result != lock.Won || c.Attempt != 2 {
		t.Fatalf("b's claim after a's lease ran out = %+v, %v; want won as attempt 2", c, err)
	}
	if c, err := a.Claim(ctx, slot, "a#1", p); err != nil || c.Result != lock.Held || c.Holder != "b" || c.Attempt != 2 {
		t.Fatalf("a's retry = %+v, %v; want held by b, attempt 2", c, err)
	}
}

// On Redlock a claim whose replies were all lost is taken over on every
// node by the retry: won as attempt 1, with max_attempts = 1.
func TestRedlockLostClaimReplyCostsNoAttempt(t *testing.T) {
	srvs := make([]*redistest.Server, 3)
	ls := make([]*loseReply, 3)
	clients := make([]*redis.Client, 3)
	for i := range srvs {
		srvs[i], ls[i] = redistest.Start(t), &loseReply{}
		clients[i] = lossyClient(t, srvs[i], ls[i])
	}
	r := newRedlock(t, clients)
	ctx := context.Background()
	slot := lostReplySlot(time.Now())
	p := lock.Policy{Lease: 30 * time.Second, DoneTTL: time.Hour, MaxAttempts: 1}
	for _, l := range ls {
		l.armed.Store(1)
	}
	if c, err := r.Claim(ctx, slot, "a#1", p); err == nil {
		t.Fatalf("claim with every reply lost = %+v; want an error", c)
	}
	c, err := r.Claim(ctx, slot, "a#1", p)
	if err != nil || c.Result != lock.Won || c.Attempt != 1 {
		t.Fatalf("retried claim = %+v, %v; want won as attempt 1", c, err)
	}
	if err := r.Complete(ctx, slot, lock.Owner{ID: "a#1", Attempt: 1}, p.DoneTTL); err != nil {
		t.Fatal(err)
	}
	_, attempts := redislock.Keys("slotd", slot)
	for i, s := range srvs {
		if n := s.Client().Get(ctx, attempts).Val(); n != "1" {
			t.Errorf("node %d attempts = %q; want 1", i, n)
		}
	}
}

// go-redis sends a command again after a network error: the claim resent
// after its reply was lost finds the first one's run value ("held" by its
// own owner, which holds nothing here) and is sent once more, asking for
// the take-over: won as attempt 1, with max_attempts = 1.
func TestResentClaimTakesOverItsOwn(t *testing.T) {
	srv := redistest.Start(t)
	l := &loseReply{resend: true}
	r := redislock.New(lossyClient(t, srv, l), "slotd")
	defer r.Close()
	ctx := context.Background()
	slot := lostReplySlot(time.Now())
	p := lock.Policy{Lease: 30 * time.Second, DoneTTL: time.Hour, MaxAttempts: 1}
	l.armed.Store(1)
	c, err := r.Claim(ctx, slot, "a#1", p)
	if err != nil || c.Result != lock.Won || c.Attempt != 1 {
		t.Fatalf("claim resent after its reply was lost = %+v, %v; want won as attempt 1", c, err)
	}
	if l.armed.Load() != 0 {
		t.Fatal("the claim was not resent (the fault did not act)")
	}
	if err := r.Complete(ctx, slot, lock.Owner{ID: "a#1", Attempt: 1}, p.DoneTTL); err != nil {
		t.Fatal(err)
	}
	_, attempts := redislock.Keys("slotd", slot)
	if n := srv.Client().Get(ctx, attempts).Val(); n != "1" {
		t.Errorf("attempts = %q; want 1", n)
	}
}

// An attempt that ran is never taken over: after attempt 1 was won and its
// release never reached Redis, the owner's claims — one whose reply is
// lost, then its retry — find attempt 1's value held and take nothing.
func TestRanAttemptNotTakenOver(t *testing.T) {
	srv := redistest.Start(t)
	l := &loseReply{}
	r := redislock.New(lossyClient(t, srv, l), "slotd")
	defer r.Close()
	ctx := context.Background()
	slot := lostReplySlot(time.Now())
	p := lock.Policy{Lease: 30 * time.Second, DoneTTL: time.Hour, MaxAttempts: 3}
	if c, err := r.Claim(ctx, slot, "a#1", p); err != nil || c.Result != lock.Won || c.Attempt != 1 {
		t.Fatalf("first claim = %+v, %v; want won as attempt 1", c, err)
	}
	// Attempt 1 runs and ends; its release never reaches Redis.
	gone, cancel := context.WithCancel(ctx)
	cancel()
	if err := r.Release(gone, slot, lock.Owner{ID: "a#1", Attempt: 1}); err == nil {
		t.Fatal("release on an ended context succeeded; want it not sent")
	}
	l.armed.Store(1)
	if _, err := r.Claim(ctx, slot, "a#1", p); !errors.Is(err, errReplyLost) {
		t.Fatalf("second claim: %v; want its reply lost", err)
	}
	c, err := r.Claim(ctx, slot, "a#1", p)
	if err != nil || c.Result != lock.Held || c.Attempt != 1 {
		t.Fatalf("claim after attempt 1 ran = %+v, %v; want held by attempt 1 (it ran: not taken over)", c, err)
	}
}

// A take-over is asked for once per slot and owner: after two lost
// replies in a row (the claim, then its take-over), the third claim finds
// the slot held by its own attempt 1 and leaves its lease alone, so that a
// claimant whose replies keep getting lost does not hold the slot through
// its window while its peers wait.
func TestLostClaimReplyTakenOverOnce(t *testing.T) {
	srv := redistest.Start(t)
	l := &loseReply{}
	r := redislock.New(lossyClient(t, srv, l), "slotd")
	defer r.Close()
	ctx := context.Background()
	slot := lostReplySlot(time.Now())
	p := lock.Policy{Lease: 30 * time.Second, DoneTTL: time.Hour, MaxAttempts: 2}
	rdb := srv.Client()
	state, attempts := redislock.Keys("slotd", slot)

	l.armed.Store(2)
	for i := range 2 {
		if _, err := r.Claim(ctx, slot, "a#1", p); !errors.Is(err, errReplyLost) {
			t.Fatalf("claim %d: %v; want its reply lost", i+1, err)
		}
	}
	if err := rdb.PExpire(ctx, state, 5*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	c, err := r.Claim(ctx, slot, "a#1", p)
	if err != nil || c.Result != lock.Held || c.Holder != "a" || c.Attempt != 1 {
		t.Fatalf("claim after two lost replies = %+v, %v; want held by its own attempt 1", c, err)
	}
	if ttl := rdb.PTTL(ctx, state).Val(); ttl > 5*time.Second {
		t.Errorf("lease after the third claim = %v; want it not set anew (at most 5s)", ttl)
	}
	if n := rdb.Get(ctx, attempts).Val(); n != "1" {
		t.Errorf("attempts = %q; want 1", n)
	}
}
