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
	"github.com/slotd/slotd/scheduler"
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

// [etcd] opens the etcd store and the history beside it; the history keeps
// about its bound of entries per task, newest first, and every entry has a
// TTL.
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
	h, ok := b.History.(*EtcdHistory)
	if !ok {
		t.Fatalf("History is %T, want *EtcdHistory", b.History)
	}
	h.maxLen = 10
	for i := 1; i <= 2*etcdTrimEvery; i++ {
		if err := h.Append(ctx, "t", scheduler.HistoryEntry{Slot: "s", Attempt: i, Outcome: "success", Error: strings.Repeat("x", 2*scheduler.MaxHistoryError)}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := h.Recent(ctx, "t", 5)
	if err != nil || len(got) != 5 {
		t.Fatalf("Recent = %d entries, %v", len(got), err)
	}
	for i, e := range got {
		if e.Attempt != 2*etcdTrimEvery-i || e.ID == "" || len(e.Error) > scheduler.MaxHistoryError {
			t.Errorf("entry %d = attempt %d id %q error %d bytes; want attempt %d, newest first", i, e.Attempt, e.ID, len(e.Error), 2*etcdTrimEvery-i)
		}
	}
	cli := b.Store.(*etcdlock.Store).Client()
	resp, err := cli.Get(ctx, EtcdHistoryPrefix("slotd", "t"), clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if n := len(resp.Kvs); n < h.maxLen || n > h.maxLen+etcdTrimEvery {
		t.Errorf("%d entries kept, want about %d", n, h.maxLen)
	}
	for _, kv := range resp.Kvs {
		ttl, err := cli.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
		if err != nil || time.Duration(ttl.TTL)*time.Second < HistoryTTL(parseEtcd(t, endpointsTOML(c)))-time.Minute {
			t.Fatalf("entry %s: lease TTL %v, %v; want the history TTL", kv.Key, ttl, err)
		}
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
