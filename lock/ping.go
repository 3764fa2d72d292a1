package lock

import "context"

// Pinger is a Store that can say cheaply, and often, whether it could
// commit a claim now. A consensus store (etcd, ZooKeeper) can answer its
// clients while it has lost its quorum; only a round through a quorum
// tells. The engine pings it between its clock checks, so that its
// readiness follows a quorum's loss within a ping's period and timeout,
// not within a clock check's.
type Pinger interface {
	// Ping returns nil if a quorum of the store answered within ctx.
	Ping(ctx context.Context) error
}
