package store

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/slotd/slotd/internal/config"
	"github.com/slotd/slotd/internal/etcdtest"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/etcdlock"
	"github.com/slotd/slotd/scheduler/history"
)

func parseEtcd(t *testing.T, section string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(section+`
[[task]]
name = "t"
schedule = "@hourly"
plugin = "exec"
  [task.params]
  command = ["true"]
`), "t.toml", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func endpointsTOML(c *etcdtest.Cluster) string {
	return fmt.Sprintf("[etcd]\nendpoints = [%q, %q, %q]\n", c.Endpoints()[0], c.Endpoints()[1], c.Endpoints()[2])
}

// [etcd] opens the etcd store and the history beside it, whose entries
// live the history TTL of the configuration.
func TestOpenEtcd(t *testing.T) {
	c := etcdtest.Start(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg := parseEtcd(t, endpointsTOML(c))
	b, err := Open(ctx, cfg, nil, WithSubscribe())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, ok := b.Store.(*etcdlock.Store); !ok {
		t.Fatalf("Store is %T, want *etcdlock.Store", b.Store)
	}
	if z := Zero(cfg); reflect.TypeOf(z) != reflect.TypeOf(b.Store) {
		t.Errorf("Zero is a %T, Open returned a %T", z, b.Store)
	}
	h, ok := b.History.(*etcdlock.History)
	if !ok {
		t.Fatalf("History is %T, want *etcdlock.History", b.History)
	}
	if err := h.Append(ctx, "t", history.Entry{Slot: "s", Attempt: 1, Outcome: "success"}); err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	resp, err := cli.Get(ctx, etcdlock.HistoryPrefix("slotd", "t"), clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("history entries = %v, %v; want the one appended", resp, err)
	}
	ttl, err := cli.TimeToLive(ctx, clientv3.LeaseID(resp.Kvs[0].Lease))
	if err != nil || time.Duration(ttl.TTL)*time.Second < HistoryTTL(cfg)-time.Minute {
		t.Fatalf("entry %s: lease TTL %v, %v; want the history TTL", resp.Kvs[0].Key, ttl, err)
	}
}

// With etcd's auth on, [etcd] username and password claim; a wrong password
// claims nothing and is not quoted in the error.
func TestOpenEtcdAuth(t *testing.T) {
	c := etcdtest.Start(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	root, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	for _, step := range []func() error{
		func() error { _, err := root.UserAdd(ctx, "root", "rootpw"); return err },
		func() error { _, err := root.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := root.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	slot := lock.Slot{Task: "t", ID: "1", Time: time.Now().Add(-time.Second), Deadline: time.Now().Add(time.Hour)}
	p := lock.Policy{Lease: 2 * time.Second, DoneTTL: time.Hour, MaxAttempts: 3}
	b, err := Open(ctx, parseEtcd(t, endpointsTOML(c)+"username = \"root\"\npassword = \"rootpw\"\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if cl, err := b.Store.Claim(ctx, slot, "r", p); err != nil || cl.Result != lock.Won || cl.Revision <= 0 {
		t.Fatalf("claim with the right password = %+v, %v; want won with a revision", cl, err)
	}
	bad, err := Open(ctx, parseEtcd(t, endpointsTOML(c)+"username = \"root\"\npassword = \"wrong-secret\"\n"), nil)
	if err == nil {
		defer bad.Close()
		slot.ID = "2"
		_, err = bad.Store.Claim(ctx, slot, "r", p)
	}
	if err == nil {
		t.Fatal("a wrong password claimed")
	}
	if strings.Contains(err.Error(), "wrong-secret") {
		t.Fatalf("the error quotes the password: %v", err)
	}
}
