package zklock

import (
	"github.com/go-zookeeper/zk"

	"github.com/slotd/slotd/lock/internal/kv"
)

// KV is the key-value store under s's fleet and controls.
func KV(s *Store) kv.Store { return zkKV{s} }

// Conn is the store's client, for tests that look under it.
func (s *Store) Conn() *zk.Conn { return s.conn }

// ACL is the ACL the store creates its nodes with, for tests that plant
// nodes as it would.
func (s *Store) ACL() []zk.ACL { return s.acl }

// AfterPutRead makes f run in every kv Put between its read of a present
// node and its write, until the returned func is called.
func AfterPutRead(f func(path string)) (restore func()) {
	afterPutRead.Store(&f)
	return func() { afterPutRead.Store(nil) }
}
