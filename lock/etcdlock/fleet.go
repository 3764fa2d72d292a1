package etcdlock

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/internal/kv"
	"github.com/slotd/slotd/retry"
)

// The fleet (lock.Fleet) and one-time markers (lock.Oncer) on etcd, over
// package kv's primitive: a name is the key "<prefix>:kv:<dir>/<name>",
// its version the key's mod revision, a write a Txn comparing it, a TTL a
// lease (a lease of its own below an hour: presence TTLs are seconds; a
// shared expiry bucket's above, as done markers). The live set is the
// "replica/" keys; the store sends lock.Taken notices (watch.go), so
// Announce lists it and a replica defers to each slot's preferred
// claimant.
//
// Keys (prefix "slotd"):
//
//	slotd:kv:replica/<replica id>           the instance nonce of the live process with that id
//	slotd:kv:fleet/first-start              the fleet's first start, unix ms
//	slotd:kv:once/<task>/<slot id>/<event>  a slot's one-time marker

// Announce implements lock.Fleet.
func (s *Store) Announce(ctx context.Context, replica, instance string, ttl time.Duration) (lock.Presence, error) {
	return s.fleet().Announce(ctx, replica, instance, ttl)
}

// Withdraw implements lock.Fleet.
func (s *Store) Withdraw(ctx context.Context, replica, instance string) error {
	return s.fleet().Withdraw(ctx, replica, instance)
}

// Started implements lock.Fleet.
func (s *Store) Started(ctx context.Context, now time.Time) (time.Time, error) {
	return s.fleet().Started(ctx, now)
}

// FirstStart implements lock.Fleet.
func (s *Store) FirstStart(ctx context.Context) (time.Time, error) { return s.fleet().FirstStart(ctx) }

// OnFleetChange implements lock.Fleet: a watch of the replica keys.
func (s *Store) OnFleetChange(f func()) (stop func()) { return s.fleet().OnFleetChange(f) }

// Once implements lock.Oncer: one Txn creating the marker's key.
func (s *Store) Once(ctx context.Context, slot lock.Slot, event, value string, ttl time.Duration) (bool, error) {
	return kv.Once(ctx, etcdKV{s}, slot, event, value, ttl)
}

func (s *Store) fleet() *kv.Fleet { return s.kvFleet }

// etcdKV is kv.Store on etcd.
type etcdKV struct{ s *Store }

func (e etcdKV) key(dir, name string) string { return e.s.prefix + ":kv:" + dir + "/" + name }

func (e etcdKV) Get(ctx context.Context, dir, name string) (kv.Entry, error) {
	key := e.key(dir, name)
	octx, cancel := opContext(ctx)
	defer cancel()
	resp, err := e.s.cli.Get(octx, key)
	if err != nil {
		return kv.Entry{}, etcdErr(fmt.Errorf("etcdlock: get %s: %w", key, err))
	}
	if len(resp.Kvs) == 0 {
		return kv.Entry{}, nil
	}
	k := resp.Kvs[0]
	out := kv.Entry{Value: string(k.Value), Version: k.ModRevision}
	if k.Lease != 0 {
		ttl, err := e.s.cli.TimeToLive(octx, clientv3.LeaseID(k.Lease))
		if err != nil {
			return kv.Entry{}, etcdErr(fmt.Errorf("etcdlock: get %s: lease: %w", key, err))
		}
		// etcd counts whole seconds, rounded down: 0 is a lease in its last
		// second, -1 one gone (it ran out between the two reads).
		if ttl.TTL < 0 {
			return kv.Entry{}, nil
		}
		out.TTL = time.Duration(ttl.TTL) * time.Second
	}
	return out, nil
}

// List implements kv.Store; the entries' TTLs are not read (0).
func (e etcdKV) List(ctx context.Context, dir string) (map[string]kv.Entry, error) {
	prefix := e.key(dir, "")
	octx, cancel := opContext(ctx)
	defer cancel()
	resp, err := e.s.cli.Get(octx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, etcdErr(fmt.Errorf("etcdlock: list %s: %w", prefix, err))
	}
	out := make(map[string]kv.Entry, len(resp.Kvs))
	for _, k := range resp.Kvs {
		out[strings.TrimPrefix(string(k.Key), prefix)] = kv.Entry{Value: string(k.Value), Version: k.ModRevision}
	}
	return out, nil
}

func (e etcdKV) Put(ctx context.Context, dir, name, value string, version int64, ttl time.Duration) (bool, error) {
	key := e.key(dir, name)
	var ok bool
	put := func(id clientv3.LeaseID) error {
		octx, cancel := opContext(ctx)
		defer cancel()
		resp, err := e.s.cli.Txn(octx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", version)).
			Then(clientv3.OpPut(key, value, clientv3.WithLease(id))).
			Commit()
		if err == nil {
			ok = resp.Succeeded
		}
		return err
	}
	var err error
	if ttl >= time.Hour {
		err = e.s.withBucket(ctx, ttl, put)
	} else {
		// A lease of its own: a bucket's lease would outlive ttl by up to
		// a second, a third of a presence TTL of three.
		octx, cancel := opContext(ctx)
		var l *clientv3.LeaseGrantResponse
		l, err = e.s.cli.Grant(octx, int64((ttl+time.Second-1)/time.Second))
		cancel()
		if err == nil {
			err = put(l.ID)
		}
	}
	if err != nil {
		return false, etcdErr(fmt.Errorf("etcdlock: put %s: %w", key, err))
	}
	return ok, nil
}

func (e etcdKV) Delete(ctx context.Context, dir, name string, version int64) (bool, error) {
	key := e.key(dir, name)
	octx, cancel := opContext(ctx)
	defer cancel()
	resp, err := e.s.cli.Txn(octx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", version)).
		Then(clientv3.OpDelete(key)).
		Commit()
	if err != nil {
		return false, etcdErr(fmt.Errorf("etcdlock: delete %s: %w", key, err))
	}
	return resp.Succeeded, nil
}

// OnMembers implements kv.Store with a watch of dir's keys: a key created
// or deleted (its lease expired included) calls f; a rewrite does not.
func (e etcdKV) OnMembers(dir string, f func()) (stop func()) {
	return e.watch(e.key(dir, ""), true, func(ev *clientv3.Event) bool { return ev.Type == mvccpb.DELETE || ev.IsCreate() }, f)
}

// OnChange implements kv.Store with a watch of the name's key: any write
// or delete calls f.
func (e etcdKV) OnChange(dir, name string, f func()) (stop func()) {
	return e.watch(e.key(dir, name), false, func(*clientv3.Event) bool { return true }, f)
}

// watch watches key (with prefix, every key under it) and calls f when a
// batch of events has one that hit selects. A watch opened again (the
// first time, or after an error) calls f once, in case a change fell in
// between. It returns once the watch is set (or after a few seconds
// without an answer), so that no change after it returns goes unheard.
func (e etcdKV) watch(key string, prefix bool, hit func(*clientv3.Event) bool, f func()) (stop func()) {
	opts := []clientv3.OpOption{clientv3.WithCreatedNotify()}
	if prefix {
		opts = append(opts, clientv3.WithPrefix())
	}
	ctx, cancel := context.WithCancel(e.s.ctx)
	ready := make(chan struct{})
	e.s.goOwned(func() {
		defer func() {
			select {
			case <-ready:
			default:
				close(ready)
			}
		}()
		backoff := retry.Backoff{Min: 50 * time.Millisecond, Max: 2 * time.Second}
		for n := 0; ctx.Err() == nil; n++ {
			wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
			for resp := range e.s.cli.Watch(wctx, key, opts...) {
				if resp.Created {
					select {
					case <-ready:
						f()
					default:
						close(ready)
					}
					n = 0
					continue
				}
				if resp.Err() != nil {
					break
				}
				for _, ev := range resp.Events {
					if hit(ev) {
						f()
						break
					}
				}
			}
			wcancel()
			select {
			case <-ctx.Done():
			case <-time.After(backoff.Delay(n)):
			}
		}
	})
	select {
	case <-ready:
	case <-time.After(5 * time.Second):
	}
	return cancel
}
