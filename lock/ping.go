package lock

import (
	"context"
	"time"
)

// Pinger is a Store that can say cheaply, and often, whether it could
// commit a claim now. A consensus store (etcd, ZooKeeper) can answer its
// clients while it has lost its quorum; only a round through a quorum
// tells. A replica pings it every PingEvery, so that its readiness
// follows a quorum's loss within PingEvery + PingTimeout, not within its
// clock check's period.
type Pinger interface {
	// Ping returns nil if a quorum of the store answered within ctx.
	Ping(ctx context.Context) error
}

// Ping timing: a quorum's loss shows within PingEvery + PingTimeout.
const (
	PingEvery   = 500 * time.Millisecond
	PingTimeout = time.Second
)
