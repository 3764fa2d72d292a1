package tasks

import (
	"strings"
	"sync"
)

// dropped holds the names DropEnv was given.
var dropped struct {
	sync.RWMutex
	names map[string]bool
}

// DropEnv keeps the named variables of the daemon's environment from every
// exec task started from now on: the variables the daemon consumed itself
// (the one [redis] url_env names, which holds a password) and any the
// operator lists. Names add up across calls; an empty name is ignored.
// A task's own env parameter can still set a dropped name: that value is
// the configuration's, not the daemon's.
func DropEnv(names ...string) {
	dropped.Lock()
	defer dropped.Unlock()
	for _, n := range names {
		if n == "" {
			continue
		}
		if dropped.names == nil {
			dropped.names = map[string]bool{}
		}
		dropped.names[n] = true
	}
}

// withoutDropped returns env, "K=V" entries, less the names DropEnv gave.
// It filters env in place.
func withoutDropped(env []string) []string {
	dropped.RLock()
	defer dropped.RUnlock()
	if len(dropped.names) == 0 {
		return env
	}
	kept := env[:0]
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if !dropped.names[name] {
			kept = append(kept, kv)
		}
	}
	return kept
}
