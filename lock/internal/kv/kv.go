// Package kv is the small primitive every slotd store has — keyed values
// with a TTL, compare-and-set on a version, a read of a directory, and a
// notice when a directory's members change — and the capabilities written
// once over it: the fleet (lock.Fleet), one-time markers (lock.Oncer) and
// the operator controls (lock.Controls, but for arming a trigger's slot).
// A store package implements Store and hands it to NewFleet and Once; the
// Redis store keeps its own Lua path (one round trip per announce, the
// live set in one sorted set), which is what it had before this package.
//
// Names are "<dir>/<name>" pairs: a store lays each directory out as it
// likes (etcd: a key prefix; ZooKeeper: a node whose children are the
// names, escaped), so that List reads one directory in one request.
package kv

import (
	"context"
	"time"
)

// Entry is a name's value as Get or List read it.
type Entry struct {
	Value string
	// Version changes with each write of the name; 0: absent or expired.
	Version int64
	// TTL is what is left of the entry's TTL, by the store's clock.
	TTL time.Duration
}

// Store is the primitive. Every method that does I/O fails with the
// store's own refusals classed as a *lock.StoreError.
type Store interface {
	// Get reads dir/name; an absent or expired entry has Version 0.
	Get(ctx context.Context, dir, name string) (Entry, error)
	// List reads every live entry of dir, by name, in one request (two
	// on a store that lists names apart from values).
	List(ctx context.Context, dir string) (map[string]Entry, error)
	// Put writes value to dir/name for ttl if the entry's version is
	// version (0: absent or expired), and reports whether it did.
	Put(ctx context.Context, dir, name, value string, version int64, ttl time.Duration) (bool, error)
	// Delete removes dir/name if its version is version, and reports
	// whether it did.
	Delete(ctx context.Context, dir, name string, version int64) (bool, error)
	// OnMembers calls f each time a name of dir appears or goes (deleted,
	// or expired as far as the store notices: a hint, as lock.Watch's).
	// A rewrite of an existing name does not call it. f must return
	// quickly; stop ends the calls.
	OnMembers(dir string, f func()) (stop func())
	// OnChange calls f each time dir/name is written or goes (a hint:
	// a watch set again after a lost connection calls it too). It
	// returns once the notice is set, so that no write after it returns
	// goes unheard. f must return quickly; stop ends the calls.
	OnChange(dir, name string, f func()) (stop func())
}
