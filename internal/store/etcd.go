package store

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/slotd/slotd/internal/config"
	"github.com/slotd/slotd/lock/etcdlock"
)

// openEtcd builds the store and history of an [etcd] configuration: one
// etcd client (TLS and auth as configured), the slot protocol on it
// (lock/etcdlock), and the history beside the slots (EtcdHistory). The
// client connects in the background; no error quotes the password.
func openEtcd(ctx context.Context, cfg *config.Config, log *slog.Logger, subscribe bool) (*Backend, error) {
	e := cfg.Etcd
	var tlsConf *tls.Config
	if e.TLSConfig != nil {
		tlsConf = e.TLSConfig.Clone()
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: e.Endpoints,
		// No DialTimeout: the client dials in the background, as go-redis
		// does, so a daemon starts while the cluster is down and claims
		// fail closed until it answers. Keepalive pings find a dead
		// connection within a lease.
		DialKeepAliveTime:    2 * time.Second,
		DialKeepAliveTimeout: 2 * time.Second,
		TLS:                  tlsConf,
		Username:             e.Username,
		Password:             e.Password,
		Logger:               zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("etcd %v: %w", e.Endpoints, err)
	}
	hc := &http.Client{Timeout: 2 * time.Second}
	if tlsConf != nil {
		hc.Transport = &http.Transport{TLSClientConfig: tlsConf}
	}
	s := etcdlock.New(cli, cfg.Prefix, etcdlock.WithHTTPClient(hc))
	log.Info("etcd", "endpoints", e.Endpoints, "auth", e.Username != "", "tls", tlsConf != nil)
	if subscribe {
		sctx, cancel := context.WithTimeout(ctx, subscribeTimeout)
		if err := s.Subscribe(sctx); err != nil {
			log.Warn("slot watch not established yet", "err", err)
		}
		cancel()
	}
	return &Backend{Store: s, History: etcdlock.NewHistory(s, cfg.Prefix, HistoryTTL(cfg)), etcd: s, etcdCli: cli}, nil
}

// closeEtcd revokes the store's running leases, stops its watch, then
// closes the client.
func (b *Backend) closeEtcd() error {
	err := b.etcd.Close()
	if cerr := b.etcdCli.Close(); err == nil {
		err = cerr
	}
	return err
}
