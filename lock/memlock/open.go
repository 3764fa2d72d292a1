package memlock

import "github.com/slotd/slotd/scheduler/history"

// Open returns an empty store on this process's clock and an empty run
// history in memory (history.Memory, keeping history.MaxLen entries per
// task): the embedded backend slotd's daemon runs without a [redis],
// [etcd] or [zookeeper] store. Neither is shared with another process.
func Open() (*Store, *history.Memory) { return New(nil), history.NewMemory(0) }
