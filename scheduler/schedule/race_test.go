//go:build race

package schedule

// underRace is true in a build with the race detector: the deterministic
// property walks below take twenty times as long there and find no race
// (the package's one shared structure, the parse cache, has its own
// concurrent test), so they walk a fifth of their length. `go test`
// without -race walks them whole.
const underRace = true
