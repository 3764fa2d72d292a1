// Package etcdlock is slotd's slot protocol (lock.Store) on an etcd
// cluster: the store for slots that must stay exactly-once through the
// failover of a store member, because every write is committed by a Raft
// quorum before it is answered. It keeps package lock's key layout and
// values, and passes the same conformance suite (lock/locktest).
//
// Guarantees, beyond those of every lock.Store:
//   - every slot operation is one etcd transaction that compares the state
//     key (its value, or its mod revision when the claim read it) and, in
//     the same transaction, counts the attempt, so the fencing token keeps
//     lock.Token's formula (slot seconds × 1000 + attempt);
//   - operations made at once share a Txn as nested transactions, each
//     with its own compares (a burst's first claims, renewals, completions
//     and releases: a hundred per Txn), so that a burst costs a few Raft
//     entries, not one per slot;
//   - a won claim carries the etcd revision of that transaction
//     (lock.Claim.Revision): one store-wide order for sinks that want one;
//   - an acknowledged claim, completion or release survives the loss of any
//     minority of members (no asynchronous replication window, unlike a
//     Redis failover);
//   - no claim starts before the slot time by the etcd member's clock (see
//     below), whatever this process's clock says.
//
// Leases. A running slot's state key is attached to an etcd lease of its
// owner — one lease per owner (replica id plus instance nonce) and lease
// length at a time, a new one every keysPerLease claims (etcd 3.4 checks
// each put on a lease against every key on it) — not to a lease of its own. The
// leases of a Store are kept alive over ONE keepalive stream at a time, and
// only on demand: a Claim or a Renew of any slot held under a lease sends
// (or joins) one keepalive of that lease, so the ten thousand renewals of a
// burst that fall on the same grid cost a few keepalives. etcd answers a
// stream's keepalives one at a time, so a keepalive unanswered for a third
// of its lease goes again, with those waiting behind it, on a fresh stream
// (the next member); its first answer on either counts (keepalive.go).
// Consequences, precisely:
//   - Renew succeeds only if the slot's key still holds the owner's value on
//     that lease AND a keepalive sent after Renew was called confirmed the
//     lease: the lease then lives at least Policy.Lease (rounded up to whole
//     seconds, etcd's unit) from the call, which is what lock.Lease's
//     watchdog counts on;
//   - when a keepalive finds the lease gone (it expired: the replica was cut
//     off or paused for longer than the lease), every hold under it is lost
//     at once, and each of their Renews answers lock.ErrNotHeld;
//   - one task's lease can be lost while the replica's lease lives on (its
//     renewals failed but another slot's did not): its watchdog cancels the
//     task, and this Store deletes the slot's key (compared on its value) one
//     lease after the last renewal it confirmed, so a peer takes it over as
//     if the lease had run out; until then the key is held, as on Redis;
//   - a crashed or partitioned replica's slots free when its lease expires
//     on the etcd leader: Policy.Lease (rounded up to a second) after the
//     last keepalive, plus an election if the leader changed meanwhile (a
//     new leader extends every lease by its full TTL).
//
// Done markers and attempt counters live on leases of the done TTL shared
// per expiry bucket (a 64th of the done TTL, at least a second and at most
// an hour), keysPerLease writes to a lease: a burst of ten thousand slots
// completes under a hundred leases, a slot's done marker on the lease its
// claim put its counter on, and every key still expires at most a bucket
// after its done TTL. Wake-ups come
// from one prefix watch per Store (a deleted state key: released, rerun or
// expired; a done value: completed), not from polling.
//
// The clock. etcd has no server-time API. The store's clock is the HTTP
// Date header of a member's /version endpoint, refined across a second
// boundary (the header changes second between two requests sent some
// milliseconds apart) and then carried forward on this process's monotonic
// clock, which a wall-clock step does not move. Claims are refused as
// Early by the lower bound of that estimate and as Late by its upper bound;
// it is resampled every ClockResample.
//
// Keys (see Keys) are under the prefix: the state key
// "<prefix>:{<task>:<slot id>}", its ":attempts" and ":base", and
// "<prefix>:probe:{<replica>}" for Probe; beside them, the run history
// (History, history.go): one key per entry under HistoryPrefix, on
// leases shared per expiry bucket, as done markers are.
package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/slotd/slotd/internal/coalesce"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/internal/kv"
)

// Store is the slot protocol on an etcd cluster. It implements lock.Store,
// lock.Prober, lock.Fleet and lock.Oncer (fleet.go) and lock.Peeker
// (releases.go, peek.go).
type Store struct {
	cli    *clientv3.Client
	prefix string
	clock  *serverClock
	leases *leases
	hub    *hub
	rels   *releases
	holds  *holds
	txns   *coalesce.Coalescer[txnReq, *clientv3.TxnResponse] // renewals, completions, releases
	writes *coalesce.Coalescer[txnReq, *clientv3.TxnResponse] // the run history's entries

	// The fleet and the operator controls over package kv's primitive
	// (fleet.go, controls.go), built once in New.
	kvFleet    *kv.Fleet
	kvControls *kv.Controls

	ctx    context.Context // ends at Close: the keepalive stream, the watch, the janitor
	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed sync.Once

	ownsClient bool // Open made cli: Close closes it
}

// Option changes how New builds a Store.
type Option func(*options)

type options struct {
	http *http.Client
}

// WithHTTPClient sets the HTTP client the store's clock reads the members'
// Date headers with (for TLS to the members: the same roots and client
// certificate as the etcd client). Default: a client with a 2s timeout.
func WithHTTPClient(c *http.Client) Option { return func(o *options) { o.http = c } }

// New returns the slot protocol on cli, with keys under prefix. It does no
// I/O. Close it before closing cli: it revokes the running leases so that
// a peer may take this process's slots at once.
func New(cli *clientv3.Client, prefix string, opts ...Option) *Store {
	o := options{http: &http.Client{Timeout: 2 * time.Second}}
	for _, opt := range opts {
		opt(&o)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Store{cli: cli, prefix: prefix, ctx: ctx, cancel: cancel}
	s.clock = newServerClock(cli.Endpoints, o.http)
	s.leases = newLeases(ctx, cli, s.goOwned)
	s.hub = newHub(s)
	s.rels = newReleases(s)
	s.holds = newHolds(s)
	s.txns = newTxns(s)
	s.writes = newWrites(s)
	s.kvFleet = kv.NewFleet(etcdKV{s}, true)
	s.kvControls = kv.NewControls(etcdKV{s}, s.Time, s.arm)
	return s
}

// Close stops the watch, the keepalive stream and the clock, and revokes
// the running leases (bounded by a second), so that the slots this process
// still holds free at once rather than after their lease. It closes the
// client only if Open made it.
func (s *Store) Close() error {
	var err error
	s.closed.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		s.txns.Close()
		s.writes.Close()
		err = s.leases.revokeRunning(ctx)
		s.cancel()
		s.wg.Wait()
		s.clock.wait()
		if cerr := s.closeClient(); err == nil {
			err = cerr
		}
	})
	return err
}

// closeClient closes the client if Open made it.
func (s *Store) closeClient() error {
	if !s.ownsClient {
		return nil
	}
	return s.cli.Close()
}

// go runs f on a goroutine the Store owns and Close waits for.
func (s *Store) goOwned(f func()) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
}

// Time implements lock.Store: the members' clock (the lower bound of its
// estimate, see the package doc), after a linearizable read, so that a
// cluster without a quorum does not answer: a replica that cannot claim is
// not ready.
func (s *Store) Time(ctx context.Context) (time.Time, error) {
	if _, err := s.cli.Get(ctx, s.prefix+":clock", clientv3.WithCountOnly()); err != nil {
		return time.Time{}, etcdErr(fmt.Errorf("etcdlock: time: %w", err))
	}
	lo, _, err := s.clock.now(ctx)
	if err != nil {
		return time.Time{}, etcdErr(fmt.Errorf("etcdlock: time: %w", err))
	}
	return lo, nil
}

// Probe implements lock.Prober: it writes lock.ProbeKey(prefix, replica)
// with ttl, as a claim writes (a quorum must commit it).
func (s *Store) Probe(ctx context.Context, replica string, ttl time.Duration) error {
	key := probeKey(s.prefix, replica)
	err := s.withBucket(ctx, ttl, func(id clientv3.LeaseID) error {
		_, err := s.cli.Put(ctx, key, replica, clientv3.WithLease(id))
		return err
	})
	if err != nil {
		return etcdErr(fmt.Errorf("etcdlock: probe %s: %w", key, err))
	}
	return nil
}

// withBucket runs f with the lease of ttl's expiry bucket, once more with
// a new one if etcd no longer knows the lease.
func (s *Store) withBucket(ctx context.Context, ttl time.Duration, f func(clientv3.LeaseID) error) error {
	return s.withBucketOf(ctx, ttl, 0, f)
}

// withBucketOf is withBucket, with lease prefer if it is a lease of ttl's
// expiry bucket.
func (s *Store) withBucketOf(ctx context.Context, ttl time.Duration, prefer clientv3.LeaseID, f func(clientv3.LeaseID) error) error {
	for try := 0; ; try++ {
		id, err := s.leases.bucketOf(ctx, ttl, prefer)
		if err != nil {
			return err
		}
		err = f(id)
		if !isLeaseNotFound(err) || try > 0 {
			return err
		}
		s.leases.forgetBucket(id)
		prefer = 0
	}
}

// keys are a slot's state, attempts and base keys.
func (s *Store) keys(slot lock.Slot) (state, attempts, base string) {
	state, attempts = Keys(s.prefix, slot)
	return state, attempts, state + ":base"
}

var errTooContended = errors.New("etcdlock: the slot's keys kept changing under the transaction")

// ttlLease returns a lease that lives at least ttl from now and at most a
// 64th of it longer (see the package doc's buckets), shared with every
// other key whose TTL ends in the same bucket: how what lives beside the
// slots expires without a lease per key.
func (s *Store) ttlLease(ctx context.Context, ttl time.Duration) (clientv3.LeaseID, error) {
	return s.leases.bucket(ctx, ttl)
}

// forgetLease drops a lease ttlLease returned after etcd answered that it
// does not know it (it was revoked), so that the next call grants another.
func (s *Store) forgetLease(id clientv3.LeaseID) { s.leases.forgetBucket(id) }
