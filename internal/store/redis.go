package store

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/internal/config"
	"github.com/slotd/slotd/lock/redislock"
)

// replicasAckTimeout bounds each WAIT of min_replicas_ack; the lock package
// caps it further at a quarter of the lease for a claim.
const replicasAckTimeout = time.Second

// openRedis builds the store and history of cfg's Redis mode
// (redislock.Open, or redislock.OpenRedlock: one client per master, the
// history on every one of them), with o's hooks on every client. It does
// no I/O unless o asks to subscribe.
func openRedis(ctx context.Context, cfg *config.Config, log *slog.Logger, o options) (*Backend, error) {
	b, err := openRedisClients(cfg, o.maxRetries)
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

// redisConfig is what the Redis store and history take of cfg.
func redisConfig(cfg *config.Config) redislock.Config {
	return redislock.Config{Prefix: cfg.Prefix, MinReplicasAck: cfg.Redis.MinReplicasAck,
		AckTimeout: replicasAckTimeout, HistoryTTL: HistoryTTL(cfg)}
}

// openRedisClients builds the clients of cfg's Redis mode (see newClient
// for maxRetries) and the store and history on them. It does no I/O.
func openRedisClients(cfg *config.Config, maxRetries int) (*Backend, error) {
	rc := redisConfig(cfg)
	b := &Backend{}
	if cfg.RedisMode() != config.ModeRedlock {
		rdb, err := newClient(cfg, maxRetries)
		if err != nil {
			return nil, err
		}
		b.clients = []redis.UniversalClient{rdb}
		s, h := redislock.Open(rdb, rc)
		b.redis, b.Store, b.History, b.hist = s, s, h, h
		return b, nil
	}
	for i := range cfg.Redis.Redlock {
		c, err := newRedlockClient(cfg, i, maxRetries)
		if err != nil {
			_ = b.Close()
			return nil, err
		}
		b.clients = append(b.clients, c)
	}
	s, h, err := redislock.OpenRedlock(b.clients, rc)
	if err != nil {
		_ = b.Close()
		return nil, err
	}
	b.redis, b.Store, b.History, b.hist = s, s, h, h
	return b, nil
}

// CheckEviction reads the eviction policy of every Redis server the
// backend writes to, and logs one that may evict slotd's keys
// (redislock.CheckEviction); nothing for the other stores.
func (b *Backend) CheckEviction(ctx context.Context, log *slog.Logger) []redislock.Eviction {
	if len(b.clients) == 0 {
		return nil
	}
	return redislock.CheckEviction(ctx, log, b.clients)
}

// newClient connects to the Redis of cfg in its mode: one server by url
// (redis://, rediss:// for TLS, unix://; user and password for ACL in the
// URL), a Sentinel-managed master (addrs + master_name) or a Redis Cluster
// (addrs + cluster). It does no I/O. maxRetries < 0 keeps go-redis's
// default. The caller closes the client.
//
// ContextTimeoutEnabled is always on: without it go-redis ignores the
// deadlines lock puts on each call and waits out its ReadTimeout, and a
// lease watchdog blocked on a frozen Redis cannot cancel its task before the
// lease runs out (see redislock.New).
func newClient(cfg *config.Config, maxRetries int) (redis.UniversalClient, error) {
	switch cfg.RedisMode() {
	case config.ModeURL:
		opt, err := config.ParseRedisURL(cfg.RedisURL)
		if err != nil { // validated at load; not expected
			return nil, fmt.Errorf("redis url: %w", err)
		}
		opt.ContextTimeoutEnabled = true
		if maxRetries >= 0 {
			opt.MaxRetries = maxRetries
		}
		if opt.TLSConfig != nil { // rediss://: ParseURL set the server name
			withTLSFiles(opt.TLSConfig, cfg.Redis.TLSConfig)
		}
		return redis.NewClient(opt), nil
	case config.ModeSentinel, config.ModeCluster:
		o := cfg.Redis
		uo := &redis.UniversalOptions{
			Addrs:                 o.Addrs,
			Username:              o.Username,
			Password:              o.Password,
			SentinelUsername:      o.SentinelUsername,
			SentinelPassword:      o.SentinelPassword,
			DB:                    o.DB,
			MasterName:            o.MasterName,
			IsClusterMode:         o.Cluster, // also with a single seed address
			ContextTimeoutEnabled: true,
		}
		if maxRetries >= 0 {
			uo.MaxRetries = maxRetries
		}
		if o.TLS {
			// No server name: crypto/tls checks each node's certificate
			// against the host it dials, which differ from node to node.
			uo.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
			withTLSFiles(uo.TLSConfig, o.TLSConfig)
		}
		return redis.NewUniversalClient(uo), nil
	}
	return nil, errors.New("no Redis configured: the embedded store is in use")
}

// newRedlockClient connects to the i-th (0-based) master of [redis]
// redlock, parsed as [redis] url is. It does no I/O.
func newRedlockClient(cfg *config.Config, i, maxRetries int) (*redis.Client, error) {
	opt, err := config.ParseRedisURL(cfg.Redis.Redlock[i])
	if err != nil { // validated at load; not expected
		return nil, fmt.Errorf("redis redlock item %d: %w", i+1, err)
	}
	opt.ContextTimeoutEnabled = true
	// A master that is down must answer at once, not after go-redis's
	// dial and command retries have used up the node timeout of every
	// claim: the quorum decides, and the scheduler retries the claim.
	opt.DialerRetries = 1
	opt.MaxRetries = -1 // no retries
	if maxRetries >= 0 {
		opt.MaxRetries = maxRetries
	}
	if opt.TLSConfig != nil { // rediss://
		withTLSFiles(opt.TLSConfig, cfg.Redis.TLSConfig)
	}
	return redis.NewClient(opt), nil
}

// withTLSFiles adds to conf the CA and client certificate read from
// [redis] tls_ca_file, tls_cert_file and tls_key_file (files may be nil).
func withTLSFiles(conf, files *tls.Config) {
	if files == nil {
		return
	}
	if files.RootCAs != nil {
		conf.RootCAs = files.RootCAs
	}
	conf.Certificates = files.Certificates
}
