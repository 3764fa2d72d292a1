package config

import (
	"fmt"

	"github.com/slotd/slotd/scheduler"
)

// checkStoreSupport refuses what the configured store cannot do, instead
// of letting it be quietly ignored: `concurrency = "forbid"|"replace"`
// needs the store's operator controls (lock.Controls: Redis and the
// embedded store, not Redlock, etcd or ZooKeeper), and an on_failure hook
// needs its one-time marker (lock.Oncer: not etcd or ZooKeeper).
func (c *Config) checkStoreSupport(p *problems) {
	var store string
	controls, once := true, true
	switch {
	case c.UsesEtcd():
		store, controls, once = "[etcd]", false, false
	case c.UsesZooKeeper():
		store, controls, once = "[zookeeper]", false, false
	case c.RedisMode() == ModeRedlock:
		store, controls = "[redis] redlock", false
	}
	for i := range c.Tasks {
		t := &c.Tasks[i]
		if !controls && (t.Concurrency == scheduler.ConcurrencyForbid || t.Concurrency == scheduler.ConcurrencyReplace) {
			p.add(fmt.Errorf("task %q: concurrency: %q needs the store's operator controls, which %s does not have yet (Redis and the embedded store do)", t.Name, t.Concurrency, store))
		}
		if !once && t.OnFailure != nil {
			p.add(fmt.Errorf("task %q: on_failure: hooks need a one-time marker in the store, which %s does not have yet (Redis, Redlock and the embedded store do); set on_failure = false for this task", t.Name, store))
		}
	}
}
