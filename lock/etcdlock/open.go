package etcdlock

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Config is what Open builds a backend from.
type Config struct {
	Endpoints          []string
	Username, Password string      // etcd's auth; none if Username is empty
	TLS                *tls.Config // to the members, for the client and the clock's reads; none if nil
	Prefix             string      // of every key (see Keys)
	HistoryTTL         time.Duration
}

// Open returns the store on a client of its own and the run history beside
// its slots (History, entries living c.HistoryTTL): what slotd's daemon
// runs on an [etcd] configuration. It does no I/O: the client connects in
// the background. Closing the store closes the client, after it. No error
// quotes the password.
func Open(c Config) (*Store, *History, error) {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: c.Endpoints,
		// No DialTimeout: the client dials in the background, as go-redis
		// does, so a daemon starts while the cluster is down and claims
		// fail closed until it answers. Keepalive pings find a dead
		// connection within a lease.
		DialKeepAliveTime:    2 * time.Second,
		DialKeepAliveTimeout: 2 * time.Second,
		TLS:                  c.TLS,
		Username:             c.Username,
		Password:             c.Password,
		Logger:               zap.NewNop(),
	})
	if err != nil {
		return nil, nil, fmt.Errorf("etcd %v: %w", c.Endpoints, err)
	}
	hc := &http.Client{Timeout: 2 * time.Second}
	if c.TLS != nil {
		hc.Transport = &http.Transport{TLSClientConfig: c.TLS}
	}
	s := New(cli, c.Prefix, WithHTTPClient(hc))
	s.ownsClient = true
	return s, NewHistory(s, c.Prefix, c.HistoryTTL), nil
}
