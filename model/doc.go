// Package model holds slotd's checked models of the slot protocol:
// slot.pml (Redis: lock/*.lua, the lease watchdog and the scheduler's slot
// runs), zk.pml (ZooKeeper: lock/zklock) and etcd.pml (etcd:
// lock/etcdlock), Promela models checked by spin through the script check,
// which also verifies that every deliberately broken variant (mutant) and
// every dropped assumption yields a counterexample. Its tests run that
// script and fail when a Lua script slot.pml mirrors (scripts.sha256) or a
// Go function zk.pml or etcd.pml mirrors (mirrored.sha256) changed without
// the model being reviewed. See docs/model.md.
//
// The package has no Go API; it exists for its tests.
package model
