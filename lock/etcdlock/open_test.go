package etcdlock

import (
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/slotd/slotd/internal/etcdtest"
)

// A store Open made closes its client after itself; a store given a
// client by New leaves it open to its owner.
func TestOpenOwnsItsClient(t *testing.T) {
	c := etcdtest.Start(t, 1)
	s, h, err := Open(Config{Endpoints: c.Endpoints(), Prefix: "slotd", HistoryTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if h.s != s || h.ttl != time.Hour {
		t.Errorf("the history is on %p with TTL %v; want the store %p, 1h", h.s, h.ttl, s)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s.cli.Ctx().Err() == nil {
		t.Error("the client Open made is still open after the store's Close")
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if err := New(cli, "slotd").Close(); err != nil {
		t.Fatal(err)
	}
	if cli.Ctx().Err() != nil {
		t.Error("Close closed the client New was given")
	}
}
