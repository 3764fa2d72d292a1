package lock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// subscription is the one pub/sub fan-out behind a Redis store's Watch and
// a Locker's Lock: one subscription per connection (one per node on a
// quorum) to the owner's notification channels, and one goroutine per
// connection that wakes the watchers of the key each message names, however
// many keys are watched. go-redis reconnects and resubscribes by itself; a
// message lost meanwhile costs only promptness, since every watcher also
// wakes when the holder's lease runs out.
type subscription struct {
	clients  []Client
	channels []string
	doneCh   string        // messages on it report completions and won claims ("" if none)
	timeout  time.Duration // bounds each connection's confirmation (0: ctx alone)
	owner    string        // "store" or "locker", for errors

	mu    sync.Mutex // guards watch and fleet; held while their callbacks run
	watch watchers
	fleet []*func() // OnFleetChange callbacks

	subMu  sync.Mutex      // held while subscribing and closing, not mu
	subs   []*redis.PubSub // one per client, once started
	closed bool
	wg     sync.WaitGroup // the fan-out goroutines
}

// add registers w for messages naming key.
func (s *subscription) add(key string, w *Watch) {
	s.mu.Lock()
	s.watch.add(key, w)
	s.mu.Unlock()
}

// remove unregisters w.
func (s *subscription) remove(key string, w *Watch) {
	s.mu.Lock()
	s.watch.remove(key, w)
	s.mu.Unlock()
}

// start subscribes, unless started or closed, without waiting for the
// server to confirm.
func (s *subscription) start() {
	s.subMu.Lock()
	defer s.subMu.Unlock()
	if s.subs != nil || s.closed {
		return
	}
	subs := make([]*redis.PubSub, len(s.clients))
	for i, c := range s.clients {
		subs[i] = c.Subscribe(context.Background(), s.channels...)
	}
	s.run(subs)
}

// confirm subscribes, once, and waits until the server has confirmed every
// channel, so that a message published after it returns is not missed; if
// already started it returns nil at once. On one connection a failure is
// returned (and nothing is started). On a quorum a connection that does not
// confirm is left to go-redis to reconnect: its watchers still wake on the
// other nodes' messages, or on the holder's lease.
func (s *subscription) confirm(ctx context.Context) error {
	s.subMu.Lock()
	defer s.subMu.Unlock()
	if s.closed {
		return fmt.Errorf("lock: subscribe: %s closed", s.owner)
	}
	if s.subs != nil {
		return nil
	}
	subs := make([]*redis.PubSub, len(s.clients))
	for i, c := range s.clients {
		subs[i] = c.Subscribe(ctx, s.channels...)
	}
	res := fanOut(ctx, subs, s.timeout, func(ctx context.Context, ps *redis.PubSub) (any, error) {
		for range s.channels { // one confirmation per channel
			if _, err := ps.Receive(ctx); err != nil {
				return nil, err
			}
		}
		return nil, nil
	})
	if len(subs) == 1 && res[0].Err != nil {
		_ = subs[0].Close()
		return fmt.Errorf("lock: subscribe %s: %w", strings.Join(s.channels, ", "), res[0].Err)
	}
	s.run(subs)
	return nil
}

// run starts the fan-out goroutine of each of subs; called with subMu held.
func (s *subscription) run(subs []*redis.PubSub) {
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
// task names cannot): completed, or, after a first line takenLine, taken.
func (s *subscription) deliver(channel, payload string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.doneCh == "" || channel != s.doneCh {
		s.watch.notify(payload, Released)
		return
	}
	if payload == fleetMessage {
		for _, f := range s.fleet {
			(*f)()
		}
		return
	}
	c := Completed
	if rest, ok := strings.CutPrefix(payload, takenLine); ok {
		c, payload = Taken, rest
	}
	for payload != "" {
		key, rest, _ := strings.Cut(payload, "\n")
		s.watch.notify(key, c)
		payload = rest
	}
}

// fleetMessage on the done channel says the live set changed (live.lua);
// no state key is "fleet": keys hold the prefix, a colon and braces.
const fleetMessage = "fleet"

// onFleet registers f for fleetMessage; stop unregisters it.
func (s *subscription) onFleet(f func()) (stop func()) {
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

// close ends the subscriptions and waits for their goroutines; later calls
// to start do nothing and to confirm fail. It does not close the clients.
func (s *subscription) close() error {
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
