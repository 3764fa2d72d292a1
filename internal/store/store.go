// Package store builds slotd's shared state from a configuration: the slot
// store (lock.Store) and the run history (scheduler.History) of the
// configured backend — the embedded in-memory store, one Redis server,
// Sentinel, Cluster or a Redlock quorum of independent masters, with TLS
// and min_replicas_ack as configured, or an etcd cluster (lock/etcdlock) or
// a ZooKeeper ensemble (lock/zookeeper), each with the history beside the
// slots — and closes them.
//
// It is the only place slotd builds go-redis clients, so that the engine
// (package scheduler) never imports go-redis. Guarantees:
//   - every client has ContextTimeoutEnabled, so each Redis call ends by
//     the deadline its caller set (a lease watchdog is never stuck on a
//     frozen server);
//   - a Redlock deployment gets one client per master, the slot protocol on
//     all of them (lock.NewRedlock), and the history on every one of them
//     (MultiHistory);
//   - the Redis history is a capped stream per task, HistoryKey, whose TTL
//     (HistoryTTL) outlives every slot's own keys; appends that meet in
//     flight share one round trip;
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
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/slotd/slotd/internal/config"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/etcdlock"
	"github.com/slotd/slotd/lock/memlock"
	zklock "github.com/slotd/slotd/lock/zklock"

	// replicasAckTimeout bounds each WAIT of min_replicas_ack; the lock package
	// caps it further at a quarter of the lease for a claim.
	"github.com/slotd/slotd/lock/redislock"
	"github.com/slotd/slotd/scheduler/history"
)

const replicasAckTimeout = time.Second

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
	// Store is the slot store: *lock.Memory (embedded), *lock.Redis or
	// *lock.Redlock.
	Store lock.Store
	// History is the run history: in memory (embedded), in Redis, or on
	// every Redlock master (*MultiHistory).
	History history.History

	redis   redisStore       // nil when embedded
	zk      *zklock.Store    // set on [zookeeper]
	etcd    *etcdlock.Store  // set on [etcd]
	etcdCli *clientv3.Client // its client, closed after it
	clients []redis.UniversalClient
	hists   []*redislock.History // closed before the clients
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
		return openZooKeeper(ctx, cfg, log)
	}
	if cfg.UsesEtcd() {
		return openEtcd(ctx, cfg, log, o.subscribe)
	}
	if cfg.Embedded() {
		log.Warn("no [redis] url, addrs or redlock: using the embedded in-memory store; slots are not shared with other replicas")
		return &Backend{Store: memlock.New(nil), History: history.NewMemory(0)}, nil
	}
	b, err := openRedis(cfg, o.maxRetries)
	if err != nil {
		return nil, err
	}
	for _, c := range b.clients {
		for _, h := range o.hooks {
			c.AddHook(h)
		}
	}
	log.Info("redis", "mode", cfg.RedisMode(), "min_replicas_ack", cfg.Redis.MinReplicasAck, "redlock_nodes", len(cfg.Redis.Redlock))
	if o.subscribe {
		sctx, cancel := context.WithTimeout(ctx, subscribeTimeout)
		if err := b.redis.Subscribe(sctx); err != nil {
			log.Warn("release notifications not subscribed yet", "err", err)
		}
		cancel()
	}
	return b, nil
}

// openRedis builds the store and history of cfg's Redis mode; see
// newClient for maxRetries. In Redlock mode there is one client per
// master, the slot protocol runs on all of them through lock.NewRedlock,
// and the history is kept on every one of them (MultiHistory). It does no
// I/O.
func openRedis(cfg *config.Config, maxRetries int) (*Backend, error) {
	b := &Backend{}
	if cfg.RedisMode() != config.ModeRedlock {
		rdb, err := newClient(cfg, maxRetries)
		if err != nil {
			return nil, err
		}
		b.clients = []redis.UniversalClient{rdb}
		b.setRedis(redislock.New(rdb, cfg.Prefix, redisStoreOptions(cfg)...))
		h := redislock.NewHistory(rdb, cfg.Prefix, HistoryTTL(cfg))
		b.History, b.hists = h, []*redislock.History{h}
		return b, nil
	}
	nodes := make([]redislock.Client, 0, len(cfg.Redis.Redlock))
	hists := make([]history.History, 0, len(cfg.Redis.Redlock))
	for i := range cfg.Redis.Redlock {
		c, err := newRedlockClient(cfg, i, maxRetries)
		if err != nil {
			_ = b.Close()
			return nil, err
		}
		b.clients = append(b.clients, c)
		nodes = append(nodes, c)
		h := redislock.NewHistory(c, cfg.Prefix, HistoryTTL(cfg))
		hists, b.hists = append(hists, h), append(b.hists, h)
	}
	s, err := redislock.NewRedlock(nodes, cfg.Prefix)
	if err != nil {
		_ = b.Close()
		return nil, err
	}
	b.setRedis(s)
	b.History = redislock.NewMultiHistory(hists...)
	return b, nil
}

func (b *Backend) setRedis(s redisStore) { b.redis, b.Store = s, s }

// CheckEviction reads the eviction policy of every Redis server the
// backend writes to, and logs one that may evict slotd's keys
// (redislock.CheckEviction); nothing for the other stores.
func (b *Backend) CheckEviction(ctx context.Context, log *slog.Logger) []redislock.Eviction {
	if len(b.clients) == 0 {
		return nil
	}
	return redislock.CheckEviction(ctx, log, b.clients)
}

// Close stops the store's subscriptions, waits for the history appends
// already queued, then closes the clients.
func (b *Backend) Close() error {
	var errs []error
	for _, h := range b.hists {
		h.Close()
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
		errs = append(errs, b.closeEtcd())
	}
	return errors.Join(errs...)
}

// redisStoreOptions are the lock options cfg asks for.
func redisStoreOptions(cfg *config.Config) []redislock.Option {
	var opts []redislock.Option
	if n := cfg.Redis.MinReplicasAck; n > 0 {
		opts = append(opts, redislock.WithMinReplicasAck(n, replicasAckTimeout))
	}
	return opts
}
