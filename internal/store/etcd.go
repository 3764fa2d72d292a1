package store

import (
	"context"
	"crypto/tls"
	"log/slog"

	"github.com/slotd/slotd/internal/config"
	"github.com/slotd/slotd/lock/etcdlock"
)

// openEtcd builds the store and history of an [etcd] configuration
// (etcdlock.Open: one client, TLS and auth as configured, the history
// beside the slots). The client connects in the background; no error
// quotes the password.
func openEtcd(ctx context.Context, cfg *config.Config, log *slog.Logger, subscribe bool) (*Backend, error) {
	e := cfg.Etcd
	var tlsConf *tls.Config
	if e.TLSConfig != nil {
		tlsConf = e.TLSConfig.Clone()
	}
	s, h, err := etcdlock.Open(etcdlock.Config{Endpoints: e.Endpoints, Username: e.Username, Password: e.Password,
		TLS: tlsConf, Prefix: cfg.Prefix, HistoryTTL: HistoryTTL(cfg)})
	if err != nil {
		return nil, err
	}
	log.Info("etcd", "endpoints", e.Endpoints, "auth", e.Username != "", "tls", tlsConf != nil)
	if subscribe {
		sctx, cancel := context.WithTimeout(ctx, subscribeTimeout)
		if err := s.Subscribe(sctx); err != nil {
			log.Warn("slot watch not established yet", "err", err)
		}
		cancel()
	}
	return &Backend{Store: s, History: h, etcd: s}, nil
}
