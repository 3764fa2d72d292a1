// Package notify is the registry behind the watches of a store whose
// notices name a key (the Redis subscription, the in-memory store): one
// notice wakes every watcher of that key, and every release reaches the
// functions that hear the releases of all keys.
package notify

import "github.com/slotd/slotd/lock"

// Watchers maps keys (state keys) to their watchers. A key has one watcher
// per watching replica in practice, so a slice (not a set) keeps the ten
// thousand keys of a burst small. The zero value is ready; the caller
// guards it.
type Watchers struct {
	m        map[string][]*lock.Watch
	releases []*func(key string) // OnRelease: every release, whatever its key
}

// Add registers w for key.
func (ws *Watchers) Add(key string, w *lock.Watch) {
	if ws.m == nil {
		ws.m = map[string][]*lock.Watch{}
	}
	ws.m[key] = append(ws.m[key], w)
}

// Remove unregisters w for key.
func (ws *Watchers) Remove(key string, w *lock.Watch) {
	set := ws.m[key]
	for i, x := range set {
		if x == w {
			set[i] = set[len(set)-1]
			set[len(set)-1] = nil
			set = set[:len(set)-1]
			break
		}
	}
	if len(set) == 0 {
		delete(ws.m, key)
	} else {
		ws.m[key] = set
	}
}

// OnRelease registers f for the release of every key (lock.Released, of
// a slot or not: f tells them apart); OffRelease with the returned value
// unregisters it.
func (ws *Watchers) OnRelease(f func(key string)) *func(key string) {
	p := &f
	ws.releases = append(ws.releases, p)
	return p
}

// OffRelease unregisters what OnRelease returned.
func (ws *Watchers) OffRelease(p *func(key string)) {
	for i, x := range ws.releases {
		if x == p {
			ws.releases = append(ws.releases[:i], ws.releases[i+1:]...)
			return
		}
	}
}

// Notify delivers c to every watcher of key, and a release to every
// OnRelease function.
func (ws *Watchers) Notify(key string, c lock.Change) {
	if c == lock.Released {
		for _, f := range ws.releases {
			(*f)(key)
		}
	}
	for _, w := range ws.m[key] {
		w.Notify(c)
	}
}

// Len is the number of watchers of key.
func (ws *Watchers) Len(key string) int { return len(ws.m[key]) }
