// Package memlock is slotd's slot protocol (lock.Store) in this process's
// memory: the embedded store for a single replica trying slotd out, and a
// fast store for unit tests. It follows the Redis store's Lua scripts step
// for step, keys included, passes the same conformance suite, implements
// the operator controls (lock.Controls), one-time markers (lock.Oncer) and
// the fleet's first start and presence (lock.Fleet, without a live set),
// and shares nothing between processes.
package memlock
