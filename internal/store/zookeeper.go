package store

import (
	"context"
	"log/slog"
	"time"

	"github.com/slotd/slotd/internal/config"
	zklock "github.com/slotd/slotd/lock/zklock"
)

// dialTimeout bounds the wait for a ZooKeeper session at Open.
const dialTimeout = 10 * time.Second

// openZooKeeper builds the slot store and history of a [zookeeper]
// configuration (zklock.Open: one session, for both); subscribed, it has
// listed the release notices before it returns.
func openZooKeeper(ctx context.Context, cfg *config.Config, log *slog.Logger, subscribe bool) (*Backend, error) {
	z := cfg.ZooKeeper
	o := zklock.Options{Servers: z.Servers, SessionTimeout: z.SessionTimeout, Root: z.Root,
		Logger: log.With("component", "zookeeper"), HistoryTTL: HistoryTTL(cfg)}
	if z.Username != "" {
		o.Digest = z.Username + ":" + z.Password
	}
	dctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	s, h, err := zklock.Open(dctx, o)
	if err != nil {
		return nil, err
	}
	log.Info("zookeeper", "servers", z.Servers, "root", z.Root, "session_timeout", s.SessionTimeout())
	if subscribe {
		sctx, cancel := context.WithTimeout(ctx, subscribeTimeout)
		if err := s.Subscribe(sctx); err != nil {
			log.Warn("release notices not watched yet", "err", err)
		}
		cancel()
	}
	return &Backend{Store: s, History: h, zk: s}, nil
}
