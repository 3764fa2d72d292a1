package lock

import (
	"context"
	"time"
)

// Prober is a Store that can show it takes writes: a store that answers
// TIME may still refuse every claim (OOM, NOPERM, READONLY; see
// ErrorKind.Refusal). Redis, Redlock, etcd and ZooKeeper implement it;
// Memory needs none.
type Prober interface {
	// Probe writes a key of replica's with ttl, as a claim
	// writes a slot's keys (one script). The error's Classify says why
	// the store refused.
	Probe(ctx context.Context, replica string, ttl time.Duration) error
}
