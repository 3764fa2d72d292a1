package redislock

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// evictionTimeout bounds CheckEviction's CONFIG GETs.
const evictionTimeout = 2 * time.Second

// Eviction is what one Redis server says of its eviction policy.
//
// slotd's keys all have TTLs, so any policy but noeviction — allkeys-*
// and volatile-* alike — may drop them once maxmemory is reached: a done
// marker evicted lets the slot run again (with the same fencing token,
// the attempts counter being gone too); a running lease evicted lets a
// peer start the slot beside the holder; history goes missing. Under
// noeviction Redis refuses the writes instead (OOM), which slotd reports
// as not ready and fails closed on.
type Eviction struct {
	Node      string // the server's address
	Policy    string // maxmemory-policy; "" when it could not be read
	MaxMemory int64  // maxmemory in bytes; 0: no limit (then no eviction, on 64-bit)
	Err       error  // why Policy is "" (CONFIG refused by an ACL or renamed, as managed Redis does)
}

// Unsafe reports whether the server's policy may evict slotd's keys.
func (e Eviction) Unsafe() bool { return e.Policy != "" && e.Policy != "noeviction" }

// CheckEviction reads maxmemory-policy and maxmemory on every Redis server
// clients write to (each master of a Cluster, each Redlock node),
// where CONFIG GET is permitted, and logs loudly — at error level — a
// policy that may evict slotd's keys (warn level while maxmemory is 0,
// when nothing is evicted yet), and at info level a server whose policy
// it cannot read. It returns what it found. It does not refuse to start:
// see docs/guarantees.md.
func CheckEviction(ctx context.Context, log *slog.Logger, clients []redis.UniversalClient) []Eviction {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithTimeout(ctx, evictionTimeout)
	defer cancel()
	var (
		mu  sync.Mutex
		out []Eviction
	)
	add := func(c redis.UniversalClient, node string) {
		e := readEviction(ctx, c, node)
		mu.Lock()
		out = append(out, e)
		mu.Unlock()
	}
	for _, c := range clients {
		if cc, ok := c.(*redis.ClusterClient); ok {
			_ = cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
				add(m, m.Options().Addr)
				return nil
			})
			continue
		}
		add(c, nodeAddr(c))
	}
	for _, e := range out {
		switch {
		case e.Policy == "":
			log.Info("cannot read Redis maxmemory-policy; make sure it is noeviction, or Redis may evict slot state at maxmemory",
				"node", e.Node, "err", e.Err)
		case e.Unsafe() && e.MaxMemory > 0:
			log.Error("Redis maxmemory-policy is not noeviction: at maxmemory it evicts slot state and history, and done slots run again; set maxmemory-policy noeviction",
				"node", e.Node, "maxmemory_policy", e.Policy, "maxmemory", e.MaxMemory)
		case e.Unsafe():
			log.Warn("Redis maxmemory-policy is not noeviction: once maxmemory is set it evicts slot state and history; set maxmemory-policy noeviction",
				"node", e.Node, "maxmemory_policy", e.Policy)
		}
	}
	return out
}

// readEviction asks one server for its policy and limit.
func readEviction(ctx context.Context, c redis.UniversalClient, node string) Eviction {
	e := Eviction{Node: node}
	res, err := c.ConfigGet(ctx, "maxmemory*").Result()
	if err != nil {
		e.Err = fmt.Errorf("CONFIG GET maxmemory-policy on %s: %w", node, err)
		return e
	}
	e.Policy = res["maxmemory-policy"]
	e.MaxMemory, _ = strconv.ParseInt(res["maxmemory"], 10, 64)
	if e.Policy == "" {
		e.Err = fmt.Errorf("CONFIG GET maxmemory-policy on %s: no answer", node)
	}
	return e
}

// nodeAddr names the server a client talks to, for logs: its address (no
// URL, so no password).
func nodeAddr(c redis.UniversalClient) string {
	if rc, ok := c.(*redis.Client); ok {
		return rc.Options().Addr
	}
	return "sentinel master"
}
