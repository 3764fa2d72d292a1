// Package redisx is the Redis plumbing that the Redis store (package
// redislock) and the Redis mutex (package mutex) share: the client they
// take, and the one pub/sub subscription behind their watches.
package redisx

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/internal/notify"
	"github.com/slotd/slotd/lock/internal/quorum"
)

// Client is the part of go-redis that the Redis store and the mutex need;
// a *redis.Client, *redis.ClusterClient or sentinel failover client all
// satisfy it.
type Client interface {
	redis.Scripter
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
	Time(ctx context.Context) *redis.TimeCmd
	Pipeline() redis.Pipeliner
}

// TakenLine starts a message on the done channel that names won claims,
// not completions: the notices share the done channel so that an ACL
// allowing slotd's two channels (docs/stores.md) still allows them. No
// state key is "taken": keys hold the prefix, a colon and braces.
// claim.lua writes it.
const TakenLine = "taken\n"

// Subscription is the one pub/sub fan-out behind a Redis store's Watch and
// a Locker's Lock: one subscription per connection (one per node on a
// quorum) to the owner's notification channels, and one goroutine per
// connection that wakes the watchers of the key each message names, however
// many keys are watched. go-redis reconnects and resubscribes by itself; a
// message lost meanwhile costs only promptness, since every watcher also
// wakes when the holder's lease runs out.
//
// Set its exported fields before the first call.
type Subscription struct {
	Clients  []Client
	Channels []string
	DoneCh   string        // messages on it report the live set's changes, and from slotd before 2026-11-30 completions and won claims ("" if none)
	Timeout  time.Duration // bounds each connection's confirmation (0: ctx alone)
	Owner    string        // "store" or "locker", for errors

	mu    sync.Mutex // guards watch and fleet; held while their callbacks run
	watch notify.Watchers
	fleet []*func() // OnFleetChange callbacks

	subMu  sync.Mutex      // held while subscribing and closing, not mu
	subs   []*redis.PubSub // one per client, once started
	closed bool
	wg     sync.WaitGroup // the fan-out goroutines
}

// Add registers w for messages naming key.
func (s *Subscription) Add(key string, w *lock.Watch) {
	s.mu.Lock()
	s.watch.Add(key, w)
	s.mu.Unlock()
}

// Remove unregisters w.
func (s *Subscription) Remove(key string, w *lock.Watch) {
	s.mu.Lock()
	s.watch.Remove(key, w)
	s.mu.Unlock()
}

// OnRelease registers f for every message on a channel other than the
// done channel (a release or rerun of the key it names); stop
// unregisters it.
func (s *Subscription) OnRelease(f func(key string)) (stop func()) {
	s.mu.Lock()
	p := s.watch.OnRelease(f)
	s.mu.Unlock()
	return sync.OnceFunc(func() {
		s.mu.Lock()
		s.watch.OffRelease(p)
		s.mu.Unlock()
	})
}

// Start subscribes, unless started or closed, without waiting for the
// server to confirm.
func (s *Subscription) Start() {
	s.subMu.Lock()
	defer s.subMu.Unlock()
	if s.subs != nil || s.closed {
		return
	}
	subs := make([]*redis.PubSub, len(s.Clients))
	for i, c := range s.Clients {
		subs[i] = c.Subscribe(context.Background(), s.Channels...)
	}
	s.run(subs)
}

// Confirm subscribes, once, and waits until the server has confirmed every
// channel, so that a message published after it returns is not missed; if
// already started it returns nil at once. On one connection a failure is
// returned (and nothing is started). On a quorum a connection that does not
// confirm is left to go-redis to reconnect: its watchers still wake on the
// other nodes' messages, or on the holder's lease.
func (s *Subscription) Confirm(ctx context.Context) error {
	s.subMu.Lock()
	defer s.subMu.Unlock()
	if s.closed {
		return fmt.Errorf("lock: subscribe: %s closed", s.Owner)
	}
	if s.subs != nil {
		return nil
	}
	subs := make([]*redis.PubSub, len(s.Clients))
	for i, c := range s.Clients {
		subs[i] = c.Subscribe(ctx, s.Channels...)
	}
	res := quorum.FanOut(ctx, subs, s.Timeout, func(ctx context.Context, ps *redis.PubSub) (any, error) {
		for range s.Channels { // one confirmation per channel
			if _, err := ps.Receive(ctx); err != nil {
				return nil, err
			}
		}
		return nil, nil
	})
	if len(subs) == 1 && res[0].Err != nil {
		_ = subs[0].Close()
		return fmt.Errorf("lock: subscribe %s: %w", strings.Join(s.Channels, ", "), res[0].Err)
	}
	s.run(subs)
	return nil
}

// run starts the fan-out goroutine of each of subs; called with subMu held.
func (s *Subscription) run(subs []*redis.PubSub) {
	s.subs = subs
	for _, ps := range subs {
		ch := ps.Channel(redis.WithChannelHealthCheckInterval(30 * time.Second))
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			for msg := range ch {
				s.deliver(msg.Channel, msg.Payload)
			}
		}()
	}
}

// deliver wakes the watchers of the key a message names, or, on the done
// channel, of each of the keys it names, one a line (keys hold no newline:
// task names cannot): completed, or, after a first line TakenLine, taken
// (a replica from before 2026-11-30 sends these; this one sends neither).
func (s *Subscription) deliver(channel, payload string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.DoneCh == "" || channel != s.DoneCh {
		s.watch.Notify(payload, lock.Released)
		return
	}
	if payload == fleetMessage {
		for _, f := range s.fleet {
			(*f)()
		}
		return
	}
	c := lock.Completed
	if rest, ok := strings.CutPrefix(payload, TakenLine); ok {
		c, payload = lock.Taken, rest
	}
	for payload != "" {
		key, rest, _ := strings.Cut(payload, "\n")
		s.watch.Notify(key, c)
		payload = rest
	}
}

// fleetMessage on the done channel says the live set changed (live.lua);
// no state key is "fleet": keys hold the prefix, a colon and braces.
const fleetMessage = "fleet"

// OnFleet registers f for fleetMessage; stop unregisters it.
func (s *Subscription) OnFleet(f func()) (stop func()) {
	p := &f
	s.mu.Lock()
	s.fleet = append(s.fleet, p)
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.fleet = slices.DeleteFunc(s.fleet, func(x *func()) bool { return x == p })
	}
}

// Close ends the subscriptions and waits for their goroutines; later calls
// to start do nothing and to confirm fail. It does not close the clients.
func (s *Subscription) Close() error {
	s.subMu.Lock()
	defer s.subMu.Unlock()
	s.closed = true
	var errs []error
	for _, ps := range s.subs {
		errs = append(errs, ps.Close())
	}
	s.subs = nil
	s.wg.Wait()
	return errors.Join(errs...)
}
