package zklock

import "github.com/go-zookeeper/zk"

// Conn is the store's client, for tests that look under it.
func (s *Store) Conn() *zk.Conn { return s.conn }

// ACL is the ACL the store creates its nodes with, for tests that plant
// nodes as it would.
func (s *Store) ACL() []zk.ACL { return s.acl }
