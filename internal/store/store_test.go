package store

import (
	"context"
	"fmt"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/internal/config"
	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/lock/memlock"
	"github.com/slotd/slotd/lock/redislock"
	"github.com/slotd/slotd/scheduler/history"
)

// countHook counts the commands a client sends.
type countHook struct{ n atomic.Int32 }

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}
func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(int32(len(cmds)))
		return next(ctx, cmds)
	}
}

// Without Redis, Open gives the embedded store and an in-memory history.
func TestOpenEmbedded(t *testing.T) {
	b, err := Open(context.Background(), parseRedis(t, ""), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := b.Store.(*memlock.Store); !ok {
		t.Errorf("Store is %T, want *memlock.Store", b.Store)
	}
	if _, ok := b.History.(*history.Memory); !ok {
		t.Errorf("History is %T, want *history.Memory", b.History)
	}
	if err := b.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// With one server, Open gives the Redis store and history on one client
// that carries the hooks; WithSubscribe subscribes before Open returns.
func TestOpenRedis(t *testing.T) {
	srv := redistest.Start(t)
	var hook countHook
	cfg := parseRedis(t, fmt.Sprintf("url = %q", srv.URL()))
	b, err := Open(context.Background(), cfg, nil, WithRedisHook(&hook), WithSubscribe())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, ok := b.Store.(*redislock.Store); !ok {
		t.Errorf("Store is %T, want *redislock.Store", b.Store)
	}
	if _, ok := b.History.(*redislock.History); !ok {
		t.Errorf("History is %T, want *redislock.History", b.History)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if n, err := srv.Client().PubSubNumSub(ctx, "slotd:released").Result(); err != nil || n["slotd:released"] != 1 {
		t.Errorf("subscribers of slotd:released = %v, %v; want 1 after WithSubscribe", n, err)
	}
	before := hook.n.Load()
	if _, err := b.Store.Time(ctx); err != nil {
		t.Fatal(err)
	}
	if hook.n.Load() == before {
		t.Error("the hook saw no command")
	}
	if err := b.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// Zero names, without dialing, the Store type Open returns for each Redis
// mode and the embedded store (etcd and ZooKeeper: TestOpenEtcd,
// TestOpenZooKeeper). Open does no I/O for these without WithSubscribe.
func TestZeroIsTheTypeOpenReturns(t *testing.T) {
	for _, keys := range []string{
		``,
		`url = "redis://127.0.0.1:1/0"`,
		"addrs = [\"127.0.0.1:1\"]\nmaster_name = \"m\"",
		"addrs = [\"127.0.0.1:1\"]\ncluster = true",
		`redlock = ["redis://127.0.0.1:1", "redis://127.0.0.1:2", "redis://127.0.0.1:3"]`,
	} {
		cfg := parseRedis(t, keys)
		b, err := Open(context.Background(), cfg, nil)
		if err != nil {
			t.Fatalf("%q: %v", keys, err)
		}
		if z := Zero(cfg); reflect.TypeOf(z) != reflect.TypeOf(b.Store) {
			t.Errorf("%s: Zero is a %T, Open returned a %T", cfg.RedisMode(), z, b.Store)
		}
		_ = b.Close()
	}
}

func TestHistoryTTL(t *testing.T) {
	cfg := &config.Config{Tasks: []config.Task{{DoneTTL: 48 * time.Hour}}}
	if got := HistoryTTL(cfg); got != MinHistoryTTL {
		t.Errorf("HistoryTTL with done_ttl 48h = %v, want %v", got, MinHistoryTTL)
	}
	cfg.Tasks = append(cfg.Tasks, config.Task{DoneTTL: 30 * 24 * time.Hour})
	if got := HistoryTTL(cfg); got != 30*24*time.Hour {
		t.Errorf("HistoryTTL with done_ttl 720h = %v, want 720h", got)
	}
}
