// Package notify is the registry behind the watches of a store whose
// notices name a key (the Redis subscription, the in-memory store): one
// notice wakes every watcher of that key, and every release reaches the
// functions that hear the notices of all keys.
package notify

import "github.com/slotd/slotd/lock"

// Watchers maps keys (state keys) to their watchers. A key has one watcher
// per watching replica in practice, so a slice (not a set) keeps the ten
// thousand keys of a burst small. The zero value is ready; the caller
// guards it.
type Watchers struct {
	m     map[string][]*lock.Watch
	every []*func(key string, c lock.Change) // OnEvery: every notice, whatever its key
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

// OnEvery registers f for every notice of every key (of a slot or not: f
// tells them apart); OffEvery with the returned value unregisters it.
func (ws *Watchers) OnEvery(f func(key string, c lock.Change)) *func(key string, c lock.Change) {
	p := &f
	ws.every = append(ws.every, p)
	return p
}

// OffEvery unregisters what OnEvery returned.
func (ws *Watchers) OffEvery(p *func(key string, c lock.Change)) {
	for i, x := range ws.every {
		if x == p {
			ws.every = append(ws.every[:i], ws.every[i+1:]...)
			return
		}
	}
}

// Notify delivers c to every watcher of key and to every OnEvery
// function.
func (ws *Watchers) Notify(key string, c lock.Change) {
	for _, f := range ws.every {
		(*f)(key, c)
	}
	for _, w := range ws.m[key] {
		w.Notify(c)
	}
}

// Len is the number of watchers of key.
func (ws *Watchers) Len(key string) int { return len(ws.m[key]) }
