package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/internal/config"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/scheduler"
)

// replicasAckTimeout bounds each WAIT of min_replicas_ack; the lock package
// caps it further at a quarter of the lease for a claim.
const replicasAckTimeout = time.Second

// newRedisClient connects to the Redis of cfg in its mode: one server by url
// (redis://, rediss:// for TLS, unix://; user and password for ACL in the
// URL), a Sentinel-managed master (addrs + master_name) or a Redis Cluster
// (addrs + cluster). It does no I/O. maxRetries < 0 keeps go-redis's
// default. The caller closes the client.
//
// ContextTimeoutEnabled is always on: without it go-redis ignores the
// deadlines lock puts on each call and waits out its ReadTimeout, and a
// lease watchdog blocked on a frozen Redis cannot cancel its task before the
// lease runs out (see lock.NewRedis).
func newRedisClient(cfg *config.Config, maxRetries int) (redis.UniversalClient, error) {
	switch cfg.RedisMode() {
	case config.ModeURL:
		opt, err := redis.ParseURL(cfg.RedisURL)
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
	return nil, fmt.Errorf("no Redis configured: the embedded store is in use")
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

// backend is slotd's shared state in cfg's Redis mode: the slot store, the
// run history, and the clients under them.
type backend struct {
	store interface {
		lock.Store
		Subscribe(ctx context.Context) error
		Close() error
	}
	hist    scheduler.History
	clients []redis.UniversalClient
}

// openBackend builds the store and history of cfg's Redis mode; see
// newRedisClient for maxRetries. In Redlock mode there is one client per
// master (each parsed as [redis] url is), the slot protocol runs on all of
// them through lock.NewRedlock, and the history is kept on every one of
// them (scheduler.MultiHistory). It does no I/O. The caller closes it.
func openBackend(cfg *config.Config, maxRetries int) (*backend, error) {
	b := &backend{}
	if cfg.RedisMode() != config.ModeRedlock {
		rdb, err := newRedisClient(cfg, maxRetries)
		if err != nil {
			return nil, err
		}
		b.clients = []redis.UniversalClient{rdb}
		b.store = lock.NewRedis(rdb, cfg.Prefix, redisStoreOptions(cfg)...)
		b.hist = scheduler.NewRedisHistory(rdb, cfg.Prefix, scheduler.HistoryTTL(cfg.Tasks))
		return b, nil
	}
	nodes := make([]lock.Client, 0, len(cfg.Redis.Redlock))
	hists := make([]scheduler.History, 0, len(cfg.Redis.Redlock))
	for i, u := range cfg.Redis.Redlock {
		opt, err := redis.ParseURL(u)
		if err != nil { // validated at load; not expected, and never quoted
			_ = b.Close()
			return nil, fmt.Errorf("redis redlock item %d: invalid URL", i+1)
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
		c := redis.NewClient(opt)
		b.clients = append(b.clients, c)
		nodes = append(nodes, c)
		hists = append(hists, scheduler.NewRedisHistory(c, cfg.Prefix, scheduler.HistoryTTL(cfg.Tasks)))
	}
	store, err := lock.NewRedlock(nodes, cfg.Prefix)
	if err != nil {
		_ = b.Close()
		return nil, err
	}
	b.store, b.hist = store, scheduler.NewMultiHistory(hists...)
	return b, nil
}

// Close stops the store's subscriptions, then closes the clients.
func (b *backend) Close() error {
	var errs []error
	if b.store != nil {
		errs = append(errs, b.store.Close())
	}
	for _, c := range b.clients {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// redisStoreOptions are the lock options cfg asks for.
func redisStoreOptions(cfg *config.Config) []lock.RedisOption {
	var opts []lock.RedisOption
	if n := cfg.Redis.MinReplicasAck; n > 0 {
		opts = append(opts, lock.WithMinReplicasAck(n, replicasAckTimeout))
	}
	return opts
}
