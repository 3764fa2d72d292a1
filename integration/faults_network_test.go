package integration

// Scenario 6 (issue 4): latency and connection resets between one replica
// and Redis, injected by toxiproxy running in the test process on
// 127.0.0.1. Each replica under test reaches the real redis-server through a
// proxy of its own, so a fault hits one replica's link and no other.

import (
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/Shopify/toxiproxy/v2/toxics"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/redislock"
)

// netProxy is one toxiproxy proxy, in-process, from a free loopback port to
// a redis-server. It counts the client connections it accepts: a client
// that reconnects after a reset shows up as one more.
type netProxy struct {
	t        *testing.T
	p        *toxiproxy.Proxy
	accepted atomic.Int64
}

func newNetProxy(t *testing.T, name, upstream string) *netProxy {
	t.Helper()
	np := &netProxy{t: t}
	logger := zerolog.New(acceptCounter{&np.accepted}).Level(zerolog.InfoLevel)
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), logger)
	np.p = toxiproxy.NewProxy(server, name, "127.0.0.1:0", upstream)
	if err := np.p.Start(); err != nil {
		t.Fatalf("toxiproxy %s: start: %v", name, err)
	}
	t.Cleanup(np.p.Stop)
	return np
}

// acceptCounter is the proxy's log sink: it counts "Accepted client" lines
// and drops the rest.
type acceptCounter struct{ n *atomic.Int64 }

func (a acceptCounter) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte(`"Accepted client"`)) {
		a.n.Add(1)
	}
	return len(p), nil
}

// URL is the redis URL a replica uses to reach Redis through the proxy.
func (np *netProxy) URL() string { return "redis://" + np.p.Listen + "/0" }

// Addr is the proxy's listening address.
func (np *netProxy) Addr() string { return np.p.Listen }

// add installs a toxic on every connection, present and future. stream is
// "upstream" (replica to Redis) or "downstream" (Redis to replica).
func (np *netProxy) add(name, typ, stream string, attrs map[string]any) {
	np.t.Helper()
	np.addToxic(name, typ, stream, 1, attrs)
}

// addToxic is add with a toxicity: the chance that the toxic acts on a
// connection.
func (np *netProxy) addToxic(name, typ, stream string, toxicity float64, attrs map[string]any) {
	np.t.Helper()
	b, err := json.Marshal(map[string]any{"name": name, "type": typ, "stream": stream, "toxicity": toxicity, "attributes": attrs})
	if err != nil {
		np.t.Fatal(err)
	}
	if _, err := np.p.Toxics.AddToxicJson(bytes.NewReader(b)); err != nil {
		np.t.Fatalf("toxiproxy %s: add toxic %s: %v", np.p.Name, b, err)
	}
}

// remove takes a toxic away.
func (np *netProxy) remove(name string) {
	np.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := np.p.Toxics.RemoveToxic(ctx, name); err != nil {
		np.t.Fatalf("toxiproxy %s: remove toxic %s: %v", np.p.Name, name, err)
	}
}

// Scenario 6a, at the lock level, where the reply's arrival can be timed:
// a claim is won in Redis but its reply is delayed by a latency toxic on the
// Redis-to-client direction. lock.Hold counts the lease from the claim's
// send time (Claim.Sent), never from the reply's arrival: a reply that
// arrives after the lease's validity (lease minus a tenth) leaves a lease
// that is lost before Hold returns, so no task can start on it. A reply
// delayed by less keeps a working lease.
func TestLateClaimReplyIsNotAWin(t *testing.T) {
	t.Parallel()
	const lease = 2 * time.Second
	for _, tc := range []struct {
		name  string
		delay time.Duration // added to the claim's reply
		won   bool          // whether the lease must be usable
	}{
		{"reply after 0.15 lease", 300 * time.Millisecond, true},
		{"reply after 0.95 lease, key still in Redis", 1900 * time.Millisecond, false},
		{"reply after 1.5 lease, key gone", 3 * time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			direct := srv.Client()
			px := newNetProxy(t, "claim", srv.Addr)
			// Socket timeouts above every delay here: only the toxic decides
			// when the reply comes.
			rdb := redis.NewClient(&redis.Options{Addr: px.Addr(), ContextTimeoutEnabled: true,
				ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second, MaxRetries: -1, PoolSize: 1})
			t.Cleanup(func() { rdb.Close() })
			store := redislock.New(rdb, "slotd")
			defer store.Close()
			now := time.Now().Truncate(time.Second)
			p := lock.Policy{Lease: lease, DoneTTL: time.Minute, MaxAttempts: 3}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			// Warm the connection and the script cache, so that the timed
			// claim is one round trip.
			warm := lock.Slot{Task: "warm", ID: "1", Time: now.Add(-time.Second), Deadline: now.Add(time.Minute)}
			if c, err := store.Claim(ctx, warm, "r1", p); err != nil || c.Result != lock.Won {
				t.Fatalf("warm-up claim: %+v %v", c, err)
			}

			slot := lock.Slot{Task: "late", ID: "1", Time: now.Add(-time.Second), Deadline: now.Add(time.Minute)}
			state, _ := redislock.Keys("slotd", slot)
			px.add("slow_reply", "latency", "downstream", map[string]any{"latency": tc.delay.Milliseconds()})
			c, err := store.Claim(ctx, slot, "r1", p)
			arrived := time.Now()
			px.remove("slow_reply")
			if err != nil || c.Result != lock.Won || c.Attempt != 1 {
				t.Fatalf("claim through the delayed link: %+v %v; want won, attempt 1", c, err)
			}
			pttl, err := direct.PTTL(ctx, state).Result()
			if err != nil {
				t.Fatal(err)
			}
			took := arrived.Sub(c.Sent)
			t.Logf("reply %v after the claim was sent (lease %v); Redis PTTL of the key %v after it arrived", took, lease, pttl)
			if took < tc.delay {
				t.Fatalf("reply after %v, want >= the toxic's %v (the toxic did not act)", took, tc.delay)
			}

			var lost atomic.Int32
			l := lock.Hold(ctx, store, slot, "r1", c, lease, lock.LeaseHooks{Lost: func(error) { lost.Add(1) }})
			// Checked at once, before anything could run: this is what the
			// scheduler does next, start the task under l.Context().
			ctxErr := l.Context().Err()
			if tc.won {
				if ctxErr != nil {
					t.Fatalf("reply %v after sending left no lease: %v", took, context.Cause(l.Context()))
				}
				// The lease works: it outlives one renewal and completes.
				time.Sleep(lease/3 + lease/6)
				if err := l.Complete(ctx, time.Minute); err != nil {
					t.Fatalf("complete: %v", err)
				}
				v, _ := direct.Get(ctx, state).Result()
				if !strings.HasPrefix(v, "done:r1:1:") {
					t.Errorf("state %q after complete, want done:r1:1:<ms>", v)
				}
				return
			}
			if ctxErr == nil {
				t.Fatalf("reply %v after sending (validity %v): Hold returned a live lease context; a task would start", took, lease-lease/10)
			}
			if cause := context.Cause(l.Context()); !errors.Is(cause, lock.ErrLeaseLost) {
				t.Errorf("lease context cause %v, want lock.ErrLeaseLost", cause)
			}
			if !l.Lost() || lost.Load() != 1 {
				t.Errorf("Lost() %v, Lost hook called %d times; want true, once", l.Lost(), lost.Load())
			}
			if pttl > 0 {
				t.Logf("Redis still held the key for %v when the reply arrived: counting from the reply would have run the task past the lease", pttl)
			}
			if err := l.Complete(ctx, time.Minute); !errors.Is(err, lock.ErrLeaseLost) {
				t.Errorf("complete of the late claim: %v, want lock.ErrLeaseLost", err)
			}
			// Nothing was written for the late claim; after its key expires a
			// peer wins the slot as attempt 2, with a higher token.
			peer := redislock.New(direct, "slotd")
			defer peer.Close()
			var c2 lock.Claim
			awaitPoll(t, "a peer's claim to win", 2*lease+5*time.Second,
				func() lock.Claim {
					c2, err = peer.Claim(ctx, slot, "r2", p)
					if err != nil {
						t.Fatalf("peer claim: %v", err)
					}
					return c2
				},
				func(c lock.Claim) bool { return c.Result == lock.Won },
				func(c lock.Claim) string { return fmt.Sprintf("last claim %+v", c) })
			if c2.Attempt != 2 || lock.Token(slot.Time, 2) <= l.Token() {
				t.Errorf("peer won attempt %d, want 2 with a token above %d", c2.Attempt, l.Token())
			}
		})
	}
}

// ---- a reset aimed at one request ----

// The reset_peer toxic resets a connection on its first data, so a client
// that reconnects is reset again until the toxic is removed, and which
// request it hits is a matter of timing. To hit exactly the complete or
// release of one attempt, once, two small toxics share a trigger: "arm"
// (on the replica-to-Redis stream) watches for the request that runs a
// given script; in mode "reply" it arms the trigger and lets the request
// through, and "cut" (Redis to replica) then drops the next integer reply
// and closes the connection — Redis ran the script, the replica never
// learns it did. In mode "request" "arm" drops the request itself and
// closes the connection — Redis never ran it. A reset_peer toxic of
// toxicity 0, which never acts, is installed first only because toxiproxy
// sets SO_LINGER 0 on the sockets of a link that has one, so that these
// closes are TCP resets.

// resetTrigger is shared by the arm and cut toxics of one proxy.
type resetTrigger struct {
	match [][]byte // the request runs the script if it holds one of these
	mode  string   // "reply" or "request"
	reply []byte   // the reply to drop starts so
	armed atomic.Bool
	fired atomic.Int32 // resets done; at most one
}

var triggers sync.Map // trigger key -> *resetTrigger

func init() {
	toxics.Register("slotd_arm", new(armToxic))
	toxics.Register("slotd_cut", new(cutToxic))
}

type armToxic struct {
	Key string `json:"key"`
}

func (a *armToxic) Pipe(stub *toxics.ToxicStub) {
	tr := trigger(a.Key)
	pipeUntilCut(stub, func(data []byte) bool {
		if tr.fired.Load() == 0 && slices.ContainsFunc(tr.match, func(m []byte) bool { return bytes.Contains(data, m) }) {
			if tr.mode == "request" {
				tr.fired.Add(1)
				return true // the request is dropped
			}
			tr.armed.Store(true)
		}
		return false
	})
}

type cutToxic struct {
	Key string `json:"key"`
}

func (x *cutToxic) Pipe(stub *toxics.ToxicStub) {
	tr := trigger(x.Key)
	pipeUntilCut(stub, func(data []byte) bool {
		// A slot script answers one reply per slot: a call for one
		// slot, an array of one integer (one won claim for claim.lua). A
		// pub/sub message (an array of three) or an error is not the
		// reply we are after.
		if bytes.HasPrefix(data, tr.reply) && tr.armed.CompareAndSwap(true, false) {
			tr.fired.Add(1)
			return true // the reply is dropped
		}
		return false
	})
}

func trigger(key string) *resetTrigger {
	v, _ := triggers.Load(key)
	return v.(*resetTrigger)
}

// pipeUntilCut passes chunks through until cut says to drop one: then the
// connection is closed (a reset) and the toxic ends.
func pipeUntilCut(stub *toxics.ToxicStub, cut func(data []byte) bool) {
	for {
		select {
		case <-stub.Interrupt:
			return
		case c := <-stub.Input:
			if c == nil || cut(c.Data) {
				stub.Close()
				return
			}
			stub.Output <- c
		}
	}
}

// resetOn installs on np a one-time reset of the request running the lock
// script file (e.g. "complete.lua"), in mode "reply" or "request", and
// returns its trigger.
func (np *netProxy) resetOn(script, mode string) *resetTrigger {
	np.t.Helper()
	src, err := os.ReadFile(filepath.Join("..", "lock", "redislock", script))
	if err != nil {
		np.t.Fatal(err)
	}
	sum := sha1.Sum(src)
	// EVALSHA names the script by its SHA1; EVAL (after NOSCRIPT) sends it
	// as its first argument. A SCRIPT LOAD of it (the batcher's, after
	// NOSCRIPT) sends it too, and is not the call.
	src1 := fmt.Sprintf("\r\n$%d\r\n-- %s:", len(src), script)
	// A one-slot call's reply: an array of one integer. The owner-checked
	// scripts answer 1 when they acted; claim.lua answers a won first
	// attempt as one integer (now*1000 + attempt) and every other result
	// as an array, so the same prefix is a won claim's.
	tr := &resetTrigger{mode: mode, reply: []byte("*1\r\n:"), match: [][]byte{
		[]byte(hex.EncodeToString(sum[:])), []byte("eval" + src1), []byte("EVAL" + src1)}}
	key := np.t.Name() + "/" + np.p.Name
	triggers.Store(key, tr)
	np.t.Cleanup(func() { triggers.Delete(key) })
	np.addToxic("linger0", "reset_peer", "downstream", 0, map[string]any{"timeout": 0})
	np.add("arm", "slotd_arm", "upstream", map[string]any{"key": key})
	np.add("cut", "slotd_cut", "downstream", map[string]any{"key": key})
	return tr
}

// startAt runs one replica of the cluster, reaching Redis at redisURL
// (a proxy's URL, or the server's own).
func (c *cluster) startAt(name, redisURL, defaults string, tasks ...string) *replica {
	c.t.Helper()
	r := startReplica(c.t, name, config(name, redisURL, "1s", defaults, tasks...))
	c.reps = append(c.reps, r)
	return r
}

// loadScript loads a lock script into the cluster's Redis, as an earlier
// claim by any replica would have: a replica's EVALSHA then runs it in one
// round trip instead of failing with NOSCRIPT first.
func (c *cluster) loadScript(script string) {
	c.t.Helper()
	src, err := os.ReadFile(filepath.Join("..", "lock", "redislock", script))
	if err != nil {
		c.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.rdb.ScriptLoad(ctx, string(src)).Err(); err != nil {
		c.t.Fatalf("SCRIPT LOAD %s: %v", script, err)
	}
}

const networkDefaults = `lease = "2s"
max_attempts = 5
timeout = "1m"
catchup = "latest"`

// Scenario 6a with slotd processes. r1's claim reaches Redis and wins, but
// every reply to r1 comes 3 s late, after the 2 s lease. r1's claim times
// out (the scheduler gives a claim a third of the lease) and runs nothing:
// the claim's outcome is unknown to it, so it fails closed. Peers that
// join once r1 holds the slot in Redis see it held, take it when the
// phantom lease runs out, and run it once, as attempt 2; the sink accepts
// that one result.
func TestDelayedClaimReplyRunsNothing(t *testing.T) {
	t.Parallel()
	const lease = 2 * time.Second
	c := newCluster(t)
	s := newSink(t)
	spec, at := oneShot(8 * time.Second)
	slot := at.Format("20060102") // oneShot's spec fires daily: a day's slot id
	task := c.sinkTask(s, "slowreply", spec, sinkScript("1"), `deadline = "40s"`)
	px := newNetProxy(t, "r1", c.srv.Addr)
	r1 := c.startAt("r1", px.URL(), networkDefaults, task)
	r1.awaitLog("scheduler started", 15*time.Second, func(r logRec) bool { return r.msg() == "scheduler started" })
	c.loadScript("claim.lua")
	px.add("slow_reply", "latency", "downstream", map[string]any{"latency": 3000})
	if time.Now().After(at.Add(-500 * time.Millisecond)) {
		t.Fatalf("r1 started too late for its slot at %s", at.Format("15:04:05"))
	}

	key := stateKey("slowreply", slot)
	c.awaitKey(key, "to hold r1's claim", 15*time.Second, func(v string, _ bool) bool { return v == "run:r1:1" })
	// r1's phantom lease ends, by Redis's timer, no earlier than this.
	before := time.Now()
	expiry := before.Add(c.pttl(key))
	wonAt := expiry.Add(-lease)
	c.startAt("r2", c.srv.URL(), networkDefaults, task)
	c.startAt("r3", c.srv.URL(), networkDefaults, task)

	evs := c.ledger.await("the slot to end", 30*time.Second, func(evs []event) bool {
		return len(find(bySlot(evs)[slot], "end", 0)) > 0
	})
	es := bySlot(evs)[slot]
	end := find(es, "end", 0)[0]
	start := find(es, "start", end.Attempt)[0]
	done := fmt.Sprintf("done:%s:%d:", end.Replica, end.Attempt)
	c.awaitKey(key, "to read "+done+"<ms>", 5*time.Second, func(v string, _ bool) bool { return strings.HasPrefix(v, done) })
	attempts, _ := c.get(attemptsKey("slowreply", slot))
	t.Logf("r1 won attempt 1 in Redis; attempt %d ran on %s, starting %v later (lease %v); attempts counter %s",
		end.Attempt, end.Replica, start.At.Sub(wonAt), lease, attempts)

	if len(find(es, "start", 0)) != 1 {
		t.Errorf("slot %s: want exactly one run:\n%s", slot, dump(es))
	}
	if end.Replica == "r1" || end.Attempt < 2 || end.Token != lock.Token(at, end.Attempt) {
		t.Errorf("slot %s: ran as attempt %d on %s token %d; want attempt >= 2 on a peer (attempt 1 is r1's, whose reply came late)",
			slot, end.Attempt, end.Replica, end.Token)
	}
	if start.At.Before(expiry) {
		t.Errorf("the peer's attempt started %v before r1's lease ran out in Redis", expiry.Sub(start.At))
	}
	for _, r := range r1.records() {
		if r.msg() == "attempt started" {
			t.Errorf("r1 started an attempt: %v", r)
		}
	}
	r1.awaitLog("its claim to fail closed", 5*time.Second, func(r logRec) bool {
		return r.msg() == "claim failed; not running, will retry" && r.str("slot") == slot
	})
	commits := s.results("commit", slot, true)
	if len(commits) != 1 || commits[0].Token != end.Token {
		t.Errorf("slot %s: accepted results %v, want one, token %d:\n%s", slot, commits, end.Token, dumpWrites(s.all()))
	}
	for _, w := range s.all() {
		if w.Replica == "r1" {
			t.Errorf("r1 wrote to the sink: %v", w)
		}
	}
}

// Scenario 6b. While the holder's task runs, its link to Redis goes bad:
// every request is delayed 5 s (past the 2 s lease), or dropped (a
// blackhole). No renewal reaches Redis, so the lease there runs out 2 s
// after the last one; the holder's watchdog must cancel the task (cause
// lock.ErrLeaseLost) before that, by Redis's own timer (PTTL, sampled
// throughout). A peer then runs the slot as attempt 2, with a higher token;
// the holder's task, killed, writes no result, and the sink accepts only
// attempt 2's.
func TestFailingRenewalsCancelBeforeExpiry(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		typ   string
		attrs map[string]any
	}{
		{"latency", "latency", map[string]any{"latency": 5000}},
		{"blackhole", "timeout", map[string]any{"timeout": 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			failingRenewals(t, tc.typ, tc.attrs)
		})
	}
}

func failingRenewals(t *testing.T, typ string, attrs map[string]any) {
	const lease = 2 * time.Second
	c := newCluster(t)
	s := newSink(t)
	spec, at := oneShot(5 * time.Second)
	task := c.sinkTask(s, "cutoff", spec, sinkScript("4"), `deadline = "40s"`)
	proxies := map[string]*netProxy{}
	for _, name := range []string{"r1", "r2", "r3"} {
		proxies[name] = newNetProxy(t, name, c.srv.Addr)
		c.startAt(name, proxies[name].URL(), networkDefaults, task)
	}

	first, holder := c.firstAttempt()
	slot := first.Slot
	key := stateKey("cutoff", slot)
	owner := "run:" + holder.name + ":1"
	proxies[holder.name].add("bad_link", typ, "upstream", attrs)
	cutAt := time.Now()

	// Redis's view of the lease: its expiry, from PTTL, sampled until the
	// holder gives the lease up. A sample's send time plus the PTTL it
	// returns is no later than the expiry Redis keeps.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var expiry time.Time
	lostMsg := func(r logRec) bool {
		return r.msg() == "lease lost: cancelling the task" && r.str("slot") == slot && r.num("attempt") == 1
	}
	for !holder.hasLog(lostMsg) {
		sent := time.Now()
		p := c.rdb.Pipeline()
		get, pttl := p.Get(ctx, key), p.PTTL(ctx, key)
		_, _ = p.Exec(ctx)
		if withoutInstance(get.Val()) == owner && pttl.Val() > 0 {
			expiry = sent.Add(pttl.Val())
		}
		if time.Since(cutAt) > 4*lease {
			t.Fatalf("holder %s did not give its lease up within %v of the link going bad; its log:\n%s", holder.name, 4*lease, tail(holder.log(), 20))
		}
		time.Sleep(poll / 4)
	}
	lost := holder.awaitLog("lease lost", time.Second, lostMsg)
	awaitGroupGone(t, first.PGID, 5*time.Second)
	goneBy := time.Now()
	if expiry.IsZero() {
		t.Fatalf("no PTTL sample of %s while %s held it", key, holder.name)
	}
	margin := expiry.Sub(lost.time())
	t.Logf("%s link: lease lost on %s %v after the cut, %v before Redis's lease expiry (lease %v); task gone by %v before it; err %s",
		typ, holder.name, lost.time().Sub(cutAt), margin, lease, expiry.Sub(goneBy), lost.str("err"))
	if margin <= 0 {
		t.Errorf("lease declared lost %v AFTER it ran out in Redis", -margin)
	}
	failed := holder.awaitLog("attempt 1 to end", 5*time.Second, func(r logRec) bool {
		return r.msg() == "attempt failed" && r.str("slot") == slot && r.num("attempt") == 1
	})
	if o := failed.str("outcome"); o != "lease_lost" {
		t.Errorf("attempt 1 outcome %q, want lease_lost", o)
	}

	evs := c.ledger.await("a peer's attempt 2 to end", 20*time.Second, func(evs []event) bool {
		return len(find(bySlot(evs)[slot], "end", 2)) > 0
	})
	es := bySlot(evs)[slot]
	second := find(es, "start", 2)[0]
	t.Logf("attempt 2 on %s started %v after Redis's expiry of attempt 1", second.Replica, second.At.Sub(expiry))
	if second.Replica == holder.name || second.Token != lock.Token(at, 2) || second.Token <= first.Token {
		t.Errorf("attempt 2 on %s token %d; want a peer of %s, token %d > %d", second.Replica, second.Token, holder.name, lock.Token(at, 2), first.Token)
	}
	if second.At.Before(expiry) {
		t.Errorf("attempt 2 started %v before attempt 1's lease ran out in Redis", expiry.Sub(second.At))
	}
	if len(find(es, "end", 1)) != 0 || len(find(es, "start", 0)) != 2 {
		t.Errorf("slot %s: want attempt 1 (cancelled, no end) and attempt 2:\n%s", slot, dump(es))
	}
	done := "done:" + second.Replica + ":2:"
	c.awaitKey(key, "to read "+done+"<ms>", 5*time.Second, func(v string, _ bool) bool { return strings.HasPrefix(v, done) })
	commits := s.results("commit", slot, true)
	if len(commits) != 1 || commits[0].Token != second.Token {
		t.Errorf("slot %s: accepted results %v, want attempt 2's only:\n%s", slot, commits, dumpWrites(s.all()))
	}

	// The link heals; whatever the old holder still had queued reaches
	// Redis and changes nothing.
	proxies[holder.name].remove("bad_link")
	time.Sleep(lease)
	if v, _ := c.get(key); !strings.HasPrefix(v, done) {
		t.Errorf("slot %s: state %q after the link healed, want %s<ms>", slot, v, done)
	}
	if n := len(find(bySlot(c.ledger.read())[slot], "start", 0)); n != 2 {
		t.Errorf("slot %s: %d runs, want 2", slot, n)
	}
}

// Scenario 6c. The connection of the replica finishing a slot is reset at
// the worst moment, once: after Redis ran its complete or release script
// but before the reply came back ("reply"), or before the request reached
// Redis ("request"). The replica does not guess the outcome: it sends the
// same owner-checked script again on a new connection, and the answer
// settles it — complete answers success again for a slot this attempt
// already completed; a release retried after it took effect answers not
// held, and the replica that took the slot meanwhile is left alone. After
// a release, attempt 2 starts at once (woken by the release), not after the
// lease. The slot ends done exactly once; every key keeps a TTL.
func TestResetDuringCompleteOrRelease(t *testing.T) {
	t.Parallel()
	for _, op := range []string{"complete", "release"} {
		for _, mode := range []string{"reply", "request"} {
			t.Run(op+"/"+mode+" lost", func(t *testing.T) {
				t.Parallel()
				resetDuring(t, op, mode)
			})
		}
	}
}

func resetDuring(t *testing.T, op, mode string) {
	const lease = 2 * time.Second
	c := newCluster(t)
	s := newSink(t)
	spec, at := oneShot(5 * time.Second)
	// Attempt 1 fails in the release case, so that it is released.
	script := `rec start
post begin || { rec rejected; sleep 60; exit 3; }
sleep 0.5
if [ "$SLOTD_ATTEMPT" = 1 ] && [ "` + op + `" = release ]; then rec fail; exit 1; fi
post commit || { rec rejected; sleep 60; exit 3; }
rec end`
	task := c.sinkTask(s, "reset", spec, script, `deadline = "40s"`)
	proxies := map[string]*netProxy{}
	trig := map[string]*resetTrigger{}
	for _, name := range []string{"r1", "r2", "r3"} {
		proxies[name] = newNetProxy(t, name, c.srv.Addr)
		trig[name] = proxies[name].resetOn(op+".lua", mode)
		c.startAt(name, proxies[name].URL(), networkDefaults, task)
	}

	first, holder := c.firstAttempt()
	slot := first.Slot
	key := stateKey("reset", slot)
	want := lock.Token(at, 1)
	wantRuns := 1
	if op == "release" {
		want, wantRuns = lock.Token(at, 2), 2
	}
	evs := c.ledger.await("the slot to end", 20*time.Second, func(evs []event) bool {
		return len(find(bySlot(evs)[slot], "end", 0)) > 0
	})
	end := find(bySlot(evs)[slot], "end", 0)[0]
	done := fmt.Sprintf("done:%s:%d:", end.Replica, end.Attempt)
	c.awaitKey(key, "to read "+done+"<ms>", 5*time.Second, func(v string, _ bool) bool { return strings.HasPrefix(v, done) })
	if op == "complete" {
		holder.awaitLog("attempt 1 to succeed", 5*time.Second, func(r logRec) bool {
			return r.msg() == "attempt succeeded" && r.str("slot") == slot && r.num("attempt") == 1
		})
	} else {
		holder.awaitLog("attempt 1 to fail", 5*time.Second, func(r logRec) bool {
			return r.msg() == "attempt failed" && r.str("slot") == slot && r.num("attempt") == 1
		})
	}
	for name, tr := range trig {
		wantFired := int32(0)
		if name == holder.name {
			wantFired = 1
		}
		if n := tr.fired.Load(); n != wantFired {
			t.Errorf("replica %s: %d connection resets on %s, want %d", name, n, op, wantFired)
		}
	}
	// Give a wrong guess time to show: a stray run, a second completion or
	// a deleted marker.
	time.Sleep(lease)
	es := bySlot(c.ledger.read())[slot]
	t.Logf("%s %s lost on %s (%d connections through its proxy); runs:\n%s",
		op, mode, holder.name, proxies[holder.name].accepted.Load(), dump(es))
	if len(find(es, "start", 0)) != wantRuns || len(find(es, "end", 0)) != 1 || end.Token != want {
		t.Errorf("slot %s: want %d run(s), one success with token %d:\n%s", slot, wantRuns, want, dump(es))
	}
	if v, _ := c.get(key); !strings.HasPrefix(v, done) {
		t.Errorf("slot %s: state %q, want still %s<ms>", slot, v, done)
	}
	if n, _ := c.get(attemptsKey("reset", slot)); n != fmt.Sprint(wantRuns) {
		t.Errorf("slot %s: attempts %q, want %d", slot, n, wantRuns)
	}
	if op == "release" {
		fail := find(es, "fail", 1)
		second := find(es, "start", 2)
		// Peers are woken by the release and the releasing replica waits
		// 20-200 ms before it claims again, so a peer usually wins attempt
		// 2; on a loaded machine the releaser sometimes does.
		if len(fail) != 1 || len(second) != 1 {
			t.Errorf("slot %s: want attempt 1 failed on %s and attempt 2:\n%s", slot, holder.name, dump(es))
		} else {
			handover := second[0].At.Sub(fail[0].At)
			t.Logf("attempt 2 started on %s %v after attempt 1 failed on %s (lease %v)", second[0].Replica, handover, holder.name, lease)
			if handover >= lease {
				t.Errorf("the peer waited %v, for the lease to run out, instead of being woken by the release", handover)
			}
		}
	}
	for _, r := range holder.records() {
		if r.str("slot") == slot && (strings.Contains(r.msg(), "release failed") || strings.Contains(r.msg(), "could not be marked done")) {
			t.Errorf("holder %s: %v", holder.name, r)
		}
	}
	if commits := s.results("commit", slot, true); len(commits) != 1 || commits[0].Token != want {
		t.Errorf("slot %s: accepted results %v, want one with token %d:\n%s", slot, commits, want, dumpWrites(s.all()))
	}
	if bad, total := c.keysWithoutTTL(); len(bad) > 0 {
		t.Errorf("%d of %d keys without a TTL: %v", len(bad), total, bad)
	}
}

// Scenario 6d. One of three replicas reaches Redis through a link adding
// 60 ms ± 40 ms each way to all its traffic (claims, renewals, completes,
// pub/sub), while 1 s slots fire; then the two others stop and it runs the
// slots alone. Every slot runs exactly once, never early, with growing
// tokens, and none is lost across the hand-over. The slot window is 3 s, longer than the 2 s
// lease, so that a claim that won in Redis but whose reply came too late
// (it would run nothing) leaves a peer time to take the slot.
func TestSlowJitteryReplicaEverySlotOnce(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	task := c.execTask("jitter", "@every 1s", `rec start; sleep 0.2; rec end`, `deadline = "3s"`)
	defaults := `lease = "2s"
max_attempts = 3
timeout = "1m"
catchup = "none"`
	c.startAt("r1", c.srv.URL(), defaults, task)
	c.startAt("r2", c.srv.URL(), defaults, task)
	px := newNetProxy(t, "r3", c.srv.Addr)
	for _, stream := range []string{"upstream", "downstream"} {
		px.add("jitter_"+stream, "latency", stream, map[string]any{"latency": 60, "jitter": 40})
	}
	c.startAt("r3", px.URL(), defaults, task)
	c.awaitStarted(15 * time.Second)
	from := time.Now()

	// With all three up, the slow replica's claims arrive last and it
	// rarely wins; so then r1 and r2 stop, and it runs the slots alone.
	c.ledger.await("6 completed slots", 60*time.Second, func(evs []event) bool {
		return slotsWith(evs, "end", 1) >= 6
	})
	for _, name := range []string{"r1", "r2"} {
		r := c.replica(name)
		r.Signal(syscall.SIGTERM)
		if st := r.Wait(15 * time.Second); st.ExitCode() != 0 {
			t.Errorf("replica %s: exit status %v after SIGTERM, want 0", name, st)
		}
	}
	c.ledger.await("4 slots run by r3", 60*time.Second, func(evs []event) bool {
		n := 0
		for _, e := range find(evs, "end", 0) {
			if e.Replica == "r3" {
				n++
			}
		}
		return n >= 4
	})
	c.stopAll()
	evs := c.ledger.read()
	slots := bySlot(evs)
	ids := sortedSlots(slots)
	var prev time.Time
	var prevToken int64
	wins := map[string]int{}
	retried := 0
	for _, id := range ids {
		at := slotTime(t, id)
		es := slots[id]
		starts, ends := find(es, "start", 0), find(es, "end", 0)
		if len(starts) != 1 || len(ends) != 1 || starts[0].PGID != ends[0].PGID {
			t.Errorf("slot %s: want one run, started and ended:\n%s", id, dump(es))
			continue
		}
		st := starts[0]
		wins[st.Replica]++
		if st.Attempt > 1 {
			retried++
		}
		if st.At.Before(at) {
			t.Errorf("slot %s started %v before its slot time", id, at.Sub(st.At))
		}
		if st.Token != lock.Token(at, st.Attempt) || st.Token <= prevToken {
			t.Errorf("slot %s: token %d (attempt %d), want %d and above the previous slot's %d", id, st.Token, st.Attempt, lock.Token(at, st.Attempt), prevToken)
		}
		// Slots after the replicas started are all there; the first one
		// may have fired before every replica was up.
		if !prev.IsZero() && at.Sub(prev) != time.Second && at.After(from) {
			t.Errorf("slots lost between %s and %s", prev.Format("150405"), at.Format("150405"))
		}
		prev, prevToken = at, st.Token
		v, ok := c.get(stateKey("jitter", id))
		if want := fmt.Sprintf("done:%s:%d:", st.Replica, st.Attempt); !ok || !strings.HasPrefix(v, want) {
			t.Errorf("slot %s: state %q (exists %v), want %s<ms>", id, v, ok, want)
		}
	}
	t.Logf("%d slots, each run once; wins by replica %v (r3 behind 60±40 ms each way); %d slots needed a second attempt", len(ids), wins, retried)
	if bad, total := c.keysWithoutTTL(); len(bad) > 0 {
		t.Errorf("%d of %d keys without a TTL: %v", len(bad), total, bad)
	}
}

// A claim whose reply is lost (the connection reset after Redis ran
// claim.lua) costs no attempt: with max_attempts = 1 and every replica's
// first claim reply lost, the replica whose claim landed takes it over on
// its retry and runs the slot once, as attempt 1, without waiting out its
// own lease. Before, its retry found the slot held by itself, and once
// that lease ran out every claim answered exhausted: the slot never ran.
func TestResetDuringClaimCostsNoAttempt(t *testing.T) {
	t.Parallel()
	const lease = 2 * time.Second
	c := newCluster(t)
	s := newSink(t)
	spec, at := oneShot(5 * time.Second)
	task := c.sinkTask(s, "claimreset", spec, sinkScript("1"), "deadline = \"40s\"\nmax_attempts = 1")
	trig := map[string]*resetTrigger{}
	for _, name := range []string{"r1", "r2", "r3"} {
		px := newNetProxy(t, name, c.srv.Addr)
		trig[name] = px.resetOn("claim.lua", "reply")
		c.startAt(name, px.URL(), networkDefaults, task)
	}
	first, holder := c.firstAttempt()
	slot := first.Slot
	evs := c.ledger.await("the slot to end", 20*time.Second, func(evs []event) bool {
		return len(find(bySlot(evs)[slot], "end", 0)) > 0
	})
	end := find(bySlot(evs)[slot], "end", 0)[0]
	if n := trig[holder.name].fired.Load(); n != 1 {
		t.Fatalf("holder %s: %d claim replies lost, want 1 (the fault did not act)", holder.name, n)
	}
	time.Sleep(lease) // give a stray second run time to show
	es := bySlot(c.ledger.read())[slot]
	t.Logf("attempt 1 started on %s %v after the slot time (lease %v); runs:\n%s",
		holder.name, first.At.Sub(at), lease, dump(es))
	if len(find(es, "start", 0)) != 1 || end.Attempt != 1 || end.Token != lock.Token(at, 1) {
		t.Errorf("slot %s: want one run, attempt 1, token %d:\n%s", slot, lock.Token(at, 1), dump(es))
	}
	if first.At.Sub(at) >= lease {
		t.Errorf("attempt 1 started %v after the slot time: the claimant waited out its own lease", first.At.Sub(at))
	}
	if n, _ := c.get(attemptsKey("claimreset", slot)); n != "1" {
		t.Errorf("slot %s: attempts %q, want 1", slot, n)
	}
	if commits := s.results("commit", slot, true); len(commits) != 1 || commits[0].Token != lock.Token(at, 1) {
		t.Errorf("slot %s: accepted results %v, want one with token %d:\n%s", slot, commits, lock.Token(at, 1), dumpWrites(s.all()))
	}
}
