package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/internal/config"
	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/redislock"
)

func parseRedis(t *testing.T, keys string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte("[redis]\n"+keys+"\n"), "test.toml", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// claimOnce runs one claim through the slot protocol on rdb, with the
// store options cfg asks for.
func claimOnce(t *testing.T, cfg *config.Config, rdb redis.UniversalClient) (lock.Claim, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	store, hist := redislock.Open(rdb, redisConfig(cfg))
	defer hist.Close()
	defer store.Close()
	now, err := store.Time(ctx)
	if err != nil {
		return lock.Claim{}, err
	}
	slot := lock.Slot{Task: strings.ReplaceAll(t.Name(), "/", "."), ID: "1", Time: now.Add(-time.Second), Deadline: now.Add(time.Hour)}
	return store.Claim(ctx, slot, "r", lock.Policy{Lease: 5 * time.Second, DoneTTL: time.Hour, MaxAttempts: 3})
}

// claimWith builds the client for the [redis] keys and claims once with it.
func claimWith(t *testing.T, keys string) (lock.Claim, error) {
	t.Helper()
	cfg := parseRedis(t, keys)
	rdb, err := newClient(cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	return claimOnce(t, cfg, rdb)
}

// One builder serves every mode: each client it returns carries the slot
// protocol to the servers of its mode, an ACL user in the URL is used and
// a wrong password is refused, and min_replicas_ack reaches the store.
func TestNewRedisClient(t *testing.T) {
	t.Run("url with ACL user", func(t *testing.T) {
		// The least the README says the user needs: the prefix's keys and
		// its two channels.
		srv := redistest.Start(t, "--user", "slotd", "on", ">s3cret", "~slotd:*", "&slotd:released", "&slotd:done", "+@all",
			"--user", "default", "off")
		for _, tc := range []struct {
			url string
			ok  bool
		}{
			{fmt.Sprintf("redis://slotd:s3cret@%s/0", srv.Addr), true},
			{fmt.Sprintf("redis://slotd:wrong@%s/0", srv.Addr), false},
			{fmt.Sprintf("redis://%s/0", srv.Addr), false}, // the default user is off
		} {
			c, err := claimWith(t, "url = "+fmt.Sprintf("%q", tc.url))
			if tc.ok && (err != nil || c.Result != lock.Won) {
				t.Errorf("claim as the ACL user = %v, %v; want won", c.Result, err)
			}
			if !tc.ok && err == nil {
				t.Errorf("claim with bad credentials succeeded (%v)", c.Result)
			}
		}
		// The user may also subscribe to both channels and complete the
		// slot it holds (complete publishes on the done channel).
		cfg := parseRedis(t, fmt.Sprintf("url = %q", fmt.Sprintf("redis://slotd:s3cret@%s/0", srv.Addr)))
		rdb, err := newClient(cfg, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer rdb.Close()
		store := redislock.New(rdb, cfg.Prefix)
		defer store.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := store.Subscribe(ctx); err != nil {
			t.Fatalf("subscribe as the ACL user: %v", err)
		}
		c, err := claimOnce(t, cfg, rdb) // held by the claim above, as replica "r"
		if err == nil {
			slot := lock.Slot{Task: strings.ReplaceAll(t.Name(), "/", "."), ID: "1", Time: c.Now.Add(-time.Second), Deadline: c.Now.Add(time.Hour)}
			err = store.Complete(ctx, slot, lock.Owner{ID: c.Holder, Attempt: c.Attempt}, time.Hour)
		}
		if err != nil || c.Holder != "r" {
			t.Fatalf("claim (holder %q) and complete as the ACL user: %v", c.Holder, err)
		}
	})
	t.Run("url with min_replicas_ack and no replica", func(t *testing.T) {
		srv := redistest.Start(t)
		cfg := parseRedis(t, fmt.Sprintf("url = %q\nmin_replicas_ack = 1", srv.URL()))
		rdb, err := newClient(cfg, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer rdb.Close()
		if _, err := claimOnce(t, cfg, rdb); !errors.Is(err, redislock.ErrNotReplicated) {
			t.Fatalf("claim on a master without replicas: %v, want ErrNotReplicated", err)
		}
	})
	t.Run("cluster", func(t *testing.T) {
		rc := redistest.StartCluster(t, 3)
		cfg := parseRedis(t, fmt.Sprintf("addrs = [%q]\ncluster = true", rc.Addrs()[1])) // one seed is enough
		rdb, err := newClient(cfg, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer rdb.Close()
		if _, ok := rdb.(*redis.ClusterClient); !ok {
			t.Fatalf("client is %T, want *redis.ClusterClient", rdb)
		}
		if c, err := claimOnce(t, cfg, rdb); err != nil || c.Result != lock.Won {
			t.Fatalf("claim on the cluster = %v, %v", c.Result, err)
		}
	})
	t.Run("sentinel", func(t *testing.T) {
		s := redistest.StartSentinel(t)
		cfg := parseRedis(t, fmt.Sprintf("addrs = [%q, %q]\nmaster_name = %q\nmin_replicas_ack = 1", s.Addrs()[0], s.Addrs()[2], s.MasterName))
		rdb, err := newClient(cfg, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer rdb.Close()
		if c, err := claimOnce(t, cfg, rdb); err != nil || c.Result != lock.Won {
			t.Fatalf("claim through the Sentinels, acknowledged by the replica = %v, %v", c.Result, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		// The claim went to the master the Sentinels name.
		direct := s.Master.Client()
		if keys, err := direct.Keys(ctx, "slotd:*").Result(); err != nil || len(keys) == 0 {
			t.Fatalf("master %s holds %v (%v), want the claim's keys", s.Master.Addr, keys, err)
		}
	})
	t.Run("url over TLS", func(t *testing.T) {
		x := redistest.NewTLS(t)
		srv := redistest.StartTLS(t, x) // requires a client certificate
		files := fmt.Sprintf("tls_ca_file = %q\ntls_cert_file = %q\ntls_key_file = %q", x.CAFile, x.ClientCert, x.ClientKey)
		for _, tc := range []struct {
			name, keys string
			ok         bool
		}{
			{"CA and client certificate", fmt.Sprintf("url = %q\n%s", srv.URL(), files), true},
			{"no client certificate", fmt.Sprintf("url = %q\ntls_ca_file = %q", srv.URL(), x.CAFile), false},
			{"CA not trusted", fmt.Sprintf("url = %q\ntls_cert_file = %q\ntls_key_file = %q", srv.URL(), x.ClientCert, x.ClientKey), false},
		} {
			c, err := claimWith(t, tc.keys)
			if tc.ok && (err != nil || c.Result != lock.Won) {
				t.Errorf("%s: claim = %v, %v; want won", tc.name, c.Result, err)
			}
			// Under TLS 1.3 the server refuses a missing client certificate
			// after the client's side of the handshake is done: the client
			// reads the alert ("certificate required") or, when its first
			// write races the server's close, a reset.
			refused := err != nil && (strings.Contains(err.Error(), "certificate") ||
				tc.name == "no client certificate" && strings.Contains(err.Error(), "connection reset by peer"))
			if !tc.ok && !refused {
				t.Errorf("%s: claim = %v, %v; want a certificate error", tc.name, c.Result, err)
			}
		}
	})
	t.Run("cluster over TLS", func(t *testing.T) {
		x := redistest.NewTLS(t)
		rc := redistest.StartClusterTLS(t, 3, x)
		cfg := parseRedis(t, fmt.Sprintf("addrs = [%q]\ncluster = true\ntls = true\ntls_ca_file = %q\ntls_cert_file = %q\ntls_key_file = %q",
			rc.Addrs()[0], x.CAFile, x.ClientCert, x.ClientKey))
		rdb, err := newClient(cfg, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer rdb.Close()
		// Claims on every shard: the client follows the layout to each
		// node over TLS, checking each node's certificate against its host.
		for i := range 6 {
			t.Run(strconv.Itoa(i), func(t *testing.T) {
				if c, err := claimOnce(t, cfg, rdb); err != nil || c.Result != lock.Won {
					t.Fatalf("claim on the TLS cluster = %v, %v", c.Result, err)
				}
			})
		}
		var masters atomic.Int32 // fn runs on the masters concurrently
		err = rdb.(*redis.ClusterClient).ForEachMaster(context.Background(), func(ctx context.Context, c *redis.Client) error {
			if n, err := c.DBSize(ctx).Result(); err == nil && n > 0 {
				masters.Add(1)
			}
			return nil
		})
		if err != nil || masters.Load() < 2 {
			t.Fatalf("claims landed on %d masters (%v); want them spread over the shards", masters.Load(), err)
		}
	})
	t.Run("embedded", func(t *testing.T) {
		if _, err := newClient(parseRedis(t, `url = ""`), 0); err == nil {
			t.Fatal("a client for the embedded store: want an error")
		}
	})
}

// Redlock masters over TLS: rediss:// URLs, with the CA and the client
// certificate of the TLS keys applied to every master.
func TestRedlockOverTLS(t *testing.T) {
	x := redistest.NewTLS(t)
	var urls []string
	for range 3 {
		urls = append(urls, fmt.Sprintf("%q", redistest.StartTLS(t, x).URL())) // each requires a client certificate
	}
	cfg := parseRedis(t, fmt.Sprintf("redlock = [%s]\ntls_ca_file = %q\ntls_cert_file = %q\ntls_key_file = %q",
		strings.Join(urls, ", "), x.CAFile, x.ClientCert, x.ClientKey))
	b, err := openRedisClients(cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	now, err := b.Store.Time(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slot := lock.Slot{Task: "tls", ID: "1", Time: now.Add(-time.Second), Deadline: now.Add(time.Hour)}
	c, err := b.Store.Claim(ctx, slot, "r", lock.Policy{Lease: 5 * time.Second, DoneTTL: time.Hour, MaxAttempts: 3})
	if err != nil || c.Result != lock.Won {
		t.Fatalf("claim on 3 TLS masters = %+v, %v", c, err)
	}
	for i, cl := range b.clients {
		if v := cl.Get(ctx, "slotd:{tls:1}").Val(); v != "run:r:1" {
			t.Errorf("master %d holds %q, want run:r:1", i, v)
		}
	}
}
