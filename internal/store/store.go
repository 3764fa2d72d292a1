// Package store opens slotd's shared state from a configuration: the slot
// store (lock.Store) and the run history (history.History) of the
// configured backend, and closes them. Each backend is one slice: its
// section of the configuration (internal/config), one file here that turns
// that section into its store package's own options (redis.go, etcd.go,
// zookeeper.go), and the store package, whose Open returns the store and
// the history beside its slots (lock/redislock, lock/etcdlock,
// lock/zklock; the embedded store is lock/memlock with history.Memory).
//
// It builds the go-redis clients, so that the engine (package scheduler)
// never imports go-redis. Guarantees:
//   - every client has ContextTimeoutEnabled, so each Redis call ends by
//     the deadline its caller set (a lease watchdog is never stuck on a
//     frozen server);
//   - a Redlock deployment gets one client per master, the slot protocol on
//     all of them and the history on every one of them
//     (redislock.OpenRedlock);
//   - every history outlives the slots' own keys (HistoryTTL);
//   - Zero names, without dialing, the Store type Open returns for a
//     configuration, so that what a store supports is read from the
//     interfaces that type implements;
//   - no error quotes a Redis URL or a password.
package store

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/internal/config"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/etcdlock"
	"github.com/slotd/slotd/lock/memlock"
	"github.com/slotd/slotd/lock/redislock"
	zklock "github.com/slotd/slotd/lock/zklock"
	"github.com/slotd/slotd/scheduler/history"
)

// MinHistoryTTL is the shortest life of a task's history after its last
// entry; HistoryTTL raises it to the longest done_ttl.
const MinHistoryTTL = 7 * 24 * time.Hour

// HistoryTTL is how long a task's history lives after its last entry: the
// longest done_ttl of cfg's tasks, and at least MinHistoryTTL, so that the
// history of a slot outlives the slot's own keys.
func HistoryTTL(cfg *config.Config) time.Duration {
	ttl := MinHistoryTTL
	for i := range cfg.Tasks {
		ttl = max(ttl, cfg.Tasks[i].DoneTTL)
	}
	return ttl
}

// subscribeTimeout bounds the first subscription to release notifications
// (WithSubscribe).
const subscribeTimeout = 5 * time.Second

// Backend is the shared state of one configuration. Close it when done.
type Backend struct {
	// Store is the slot store: *memlock.Store (embedded),
	// *redislock.Store, *redislock.Redlock, *etcdlock.Store or
	// *zklock.Store.
	Store lock.Store
	// History is the run history beside the slots: *history.Memory
	// (embedded), *redislock.History, *redislock.MultiHistory (on every
	// Redlock master), *etcdlock.History or *zklock.History.
	History history.History

	redis   redisStore      // nil when embedded
	zk      *zklock.Store   // set on [zookeeper]
	etcd    *etcdlock.Store // set on [etcd]; it closes its client
	clients []redis.UniversalClient
	hist    interface{ Close() } // the Redis history, closed before the clients
}

// redisStore is what the Redis stores offer beyond lock.Store.
type redisStore interface {
	lock.Store
	Subscribe(ctx context.Context) error
	Close() error
}

// Option changes how Open builds a Backend.
type Option func(*options)

type options struct {
	maxRetries int
	hooks      []redis.Hook
	subscribe  bool
}

// WithMaxRetries sets go-redis's command retries of every client (by
// default go-redis's own; none on a Redlock master, where the quorum
// decides and the caller retries).
func WithMaxRetries(n int) Option { return func(o *options) { o.maxRetries = n } }

// WithRedisHook adds h to every go-redis client (for example to count or
// trace the daemon's Redis commands).
func WithRedisHook(h redis.Hook) Option { return func(o *options) { o.hooks = append(o.hooks, h) } }

// WithSubscribe has Open subscribe the store to its release and done
// notifications before it returns, as the daemon needs for its watches.
// It waits at most 5s (and no longer than ctx); a failure is logged, not
// returned: the watches subscribe again by themselves, and claims fail
// closed until Redis answers.
func WithSubscribe() Option { return func(o *options) { o.subscribe = true } }

// Zero returns the zero value (a nil pointer) of the Store type that Open
// returns for cfg, without dialing anything: what that type implements
// (lock.Controls, lock.Oncer, ...) is what the configured store supports,
// so that a command can refuse a task the store cannot serve before any
// store is reached. Only type assertions may be made on it.
func Zero(cfg *config.Config) lock.Store {
	switch {
	case cfg.UsesZooKeeper():
		return (*zklock.Store)(nil)
	case cfg.UsesEtcd():
		return (*etcdlock.Store)(nil)
	case cfg.Embedded():
		return (*memlock.Store)(nil)
	case cfg.RedisMode() == config.ModeRedlock:
		return (*redislock.Redlock)(nil)
	}
	return (*redislock.Store)(nil)
}

// Open builds the store and history of cfg's backend (cfg.RedisMode()),
// logging which one on log. It does no I/O unless WithSubscribe is given,
// but for [zookeeper], where it waits (at most 10s) for a session.
func Open(ctx context.Context, cfg *config.Config, log *slog.Logger, opts ...Option) (*Backend, error) {
	o := options{maxRetries: -1}
	for _, opt := range opts {
		opt(&o)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.UsesZooKeeper() {
		return openZooKeeper(ctx, cfg, log, o.subscribe)
	}
	if cfg.UsesEtcd() {
		return openEtcd(ctx, cfg, log, o.subscribe)
	}
	if cfg.Embedded() {
		log.Warn("no [redis] url, addrs or redlock: using the embedded in-memory store; slots are not shared with other replicas")
		s, h := memlock.Open()
		return &Backend{Store: s, History: h}, nil
	}
	return openRedis(ctx, cfg, log, o)
}

// Close stops the store's subscriptions, waits for the history appends
// already queued, then closes the clients.
func (b *Backend) Close() error {
	var errs []error
	if b.hist != nil {
		b.hist.Close()
	}
	if b.redis != nil {
		errs = append(errs, b.redis.Close())
	}
	for _, c := range b.clients {
		errs = append(errs, c.Close())
	}
	if b.zk != nil {
		errs = append(errs, b.zk.Close())
	}
	if b.etcd != nil {
		errs = append(errs, b.etcd.Close())
	}
	return errors.Join(errs...)
}
