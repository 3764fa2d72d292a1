package lock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed probe.lua
	probeLua    string
	probeScript = redis.NewScript(probeLua)
)

// Prober is a Store that can show it takes writes: a store that answers
// TIME may still refuse every claim (OOM, NOPERM, READONLY; see
// ErrorKind.Refusal). Redis, Redlock, etcd and ZooKeeper implement it;
// Memory needs none.
type Prober interface {
	// Probe writes the key ProbeKey(prefix, replica) with ttl, as a claim
	// writes a slot's keys (one script). The error's Classify says why
	// the store refused.
	Probe(ctx context.Context, replica string, ttl time.Duration) error
}

// ProbeKey is the key Probe writes for replica under prefix; its hash tag
// is the replica id, so each replica probes one shard of a Cluster.
func ProbeKey(prefix, replica string) string { return prefix + ":probe:{" + replica + "}" }

// Probe implements Prober with the probe script.
func (r *Redis) Probe(ctx context.Context, replica string, ttl time.Duration) error {
	key := ProbeKey(r.prefix, replica)
	ms := max(ttl.Milliseconds(), 1)
	if err := probeScript.Run(ctx, r.rdb, []string{key}, replica, strconv.FormatInt(ms, 10)).Err(); err != nil {
		return redisErr(fmt.Errorf("lock: probe %s: %w", key, err))
	}
	return nil
}

// Probe implements Prober: the probe on every node; it fails when fewer
// than a quorum take it, as a claim would.
func (r *Redlock) Probe(ctx context.Context, replica string, ttl time.Duration) error {
	res := all(ctx, r, 0, func(ctx context.Context, n *Redis) (struct{}, error) {
		return struct{}{}, n.Probe(ctx, replica, ttl)
	})
	var errs []error
	for i, nr := range res {
		if nr.Err != nil {
			errs = append(errs, fmt.Errorf("node %d: %w", i, nr.Err))
		}
	}
	if len(res)-len(errs) < r.quorum() {
		return fmt.Errorf("lock: probe: %d of %d nodes took it: %w: %w", len(res)-len(errs), len(r.nodes), ErrNoQuorum, errors.Join(errs...))
	}
	return nil
}
