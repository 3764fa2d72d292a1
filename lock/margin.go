package lock

import "time"

// LeaseMargin is how long before a lease of ttl on s could run out its
// holder takes it as lost (Lease): for a holder that keeps a record of its
// own beside the lease under the same rule, as the engine's running record
// of a task, valid until ttl − LeaseMargin after its last renewal confirmed
// sent.
func LeaseMargin(s Store, ttl time.Duration) time.Duration { return leaseMargin(s, ttl) }
