package integration

// Scenario 6 (issue 4): latency and connection resets between one replica
// and Redis, injected by toxiproxy running in the test process on
// 127.0.0.1. Each replica under test reaches the real redis-server through a
// proxy of its own, so a fault hits one replica's link and no other.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/slotd/slotd/integration/redistest"
	"github.com/slotd/slotd/lock"
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
	b, err := json.Marshal(map[string]any{"name": name, "type": typ, "stream": stream, "attributes": attrs})
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
			store := lock.NewRedis(rdb, "slotd")
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
			state, _ := lock.Keys("slotd", slot)
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
			peer := lock.NewRedis(direct, "slotd")
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

var _ = sync.Mutex{}
var _ = os.Getpid
var _ = filepath.Join
