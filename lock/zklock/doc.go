// Package zklock is slotd's slot protocol (lock.Store) on a ZooKeeper
// ensemble: the store for slots that must stay exactly-once through a
// failover, because every write is committed by a quorum before it is
// acknowledged, and a claim is held by a session, not by a clock.
//
// # Nodes
//
// Under the root (default /slotd; task names and slot ids are escaped so
// that any name is one path element):
//
//	/slotd                          container
//	/slotd/<task>                   container
//	/slotd/<task>/<slot id>         the slot node: a TTL node (Policy.DoneTTL), data
//	                                "<attempts>\n<base>\n<done value or empty>"
//	/slotd/<task>/<slot id>/run     the running claim: an ephemeral node of the
//	                                holder's session, data
//	                                "run:<owner>:<attempt>\n<lease ms>"
//	/slotd/.clock                   a TTL node every replica writes to read the
//	                                leader's clock (its mtime)
//	/slotd/.probe-<replica>         a TTL node a replica writes to show the
//	                                ensemble takes its writes (Probe)
//	/slotd/.history/<task>          container of a task's history entries (history.go)
//	/slotd/.kv/<dir>/<name>         the fleet's presence and first start, and the
//	                                slots' one-time markers: TTL nodes (fleet.go)
//
// Containers go when their last child goes, TTL nodes when they have no
// children and their TTL has passed since their last write, ephemeral nodes
// with their session: every node expires. TTL nodes need the servers to run
// with zookeeper.extendedTypesEnabled=true (ZooKeeper 3.5.3 and later).
//
// # Claims and fencing
//
// A claim is one multi-op, committed or refused as a whole: set the slot
// node's data to attempts+1 under a check of the version read, and create
// the ephemeral run node (which fails if it exists). The attempt counted in
// that same transaction gives the fencing token lock.Token(slot time,
// attempt) every store uses; the transaction's zxid, which orders every
// write of the ensemble, is handed to the task as Claim.Revision
// (SLOTD_STORE_REVISION). Renew, Complete, Release and Rerun read, compare
// the run node's value with the caller's, and write under version checks of
// both nodes, so a slot released and claimed again in between is never
// mistaken for the same attempt. Completing deletes the run node and writes
// the done marker into the slot node's data in one multi-op.
//
// # Leases are sessions, and run out by the leader's clock
//
// The run node lives at most as long as the session of the replica that
// claimed it: it goes when the replica releases or completes the slot, or
// when the ensemble expires the session — the session timeout after the
// ensemble last heard from the replica. Within that, Policy.Lease is how
// long the engine's Lease watchdog lets the task run without a confirmed
// renewal. Renew is a write through the leader (a version-checked set of
// the run node) that succeeds only while the session lives, so each
// confirmed renewal proves the session was alive when it was sent, and the
// ensemble cannot expire it before a session timeout later. The watchdog
// cancels the task Lease (less a tenth) after the last confirmed renewal
// was sent; Claim refuses a Policy.Lease longer than the negotiated
// session timeout, so a replica cut off from the ensemble has its task
// cancelled before the session can expire, and so before a peer's claim
// can win. A replica that crashes frees its slots one session timeout
// after it went silent (peers are woken by their watches); one that shuts
// down cleanly closes its session and frees them at once.
//
// A session can outlive its holder's lease: a holder frozen for less than
// the session timeout, or whose renewals fail while its pings pass. A
// frozen holder cannot delete anything, so the run node records the lease,
// and peers judge it by the leader's clock: a run node whose mtime (the
// leader's stamp of the claim or of its last renewal, which the holder
// sent no earlier than it counts its lease from) is a lease old by a
// lower bound of the leader's clock is free, and a claim deletes it in its
// own multi-op, under a check of the version read, so a renewal that
// landed first wins. A holder awake to find its lease lost releases the
// slot, which deletes the node at once (lock.Lease.Release). While there
// is no leader nobody renews, and a new leader gives every session a fresh
// timeout: a run node last written under an older leader counts its lease
// from the earliest stamp this store has seen of the newest leader, and a
// claim that finds a lease run out judges it again by a reading of the
// clock taken after its read (Store.leaseLeft), so that a completion
// retried through an election lands before any peer takes the slot.
//
// # Clock
//
// No claim succeeds before the slot time (minus Policy.Tolerance) or at or
// after the deadline, by the leader's clock, never the replica's: Time
// writes /slotd/.clock and returns its mtime, which the leader stamps on
// the transaction; Claim checks the slot window against the last such
// reading plus the monotonic time elapsed since (a lower bound of the
// leader's clock for the start, an upper bound for the deadline), and then
// again against the mtime the claim's own transaction got: a claim that
// landed outside the window after all (a new leader with another clock) is
// undone before it is reported. A replica whose clock is off by minutes
// neither starts early nor late. The leaders' clocks are assumed to be
// close to each other (NTP): a failover to a leader whose clock is behind
// moves the window by that much.
//
// # Wake-ups
//
// Watch registers the slot and arms an exists watch of its run node
// (WatchClaims, for a replica about to claim, arms nothing until its
// claims do); a claim through the store arms what its result needs (the
// run node's watch for a slot found held, the slot node's for one found
// done), and the store's own completion or release is told to its
// watches without a watch. Each
// watch event is acted on with the fewest requests that say what
// happened (see watcher): the run node's creation or rewrite is told as
// Taken from the event alone, its deletion costs a read of the slot node
// (done, or free), and only a change of the slot node reads both.
// ZooKeeper delivers watch events in order and re-arms them after a
// reconnection; after a session expiry the store reads every watched slot
// again on its new session.
package zklock
