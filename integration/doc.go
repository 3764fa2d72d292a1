// Package integration holds slotd's end-to-end tests: they build the slotd
// binary once and run several replicas of it as separate processes against
// one real redis-server on 127.0.0.1, checking the guarantees of the spec
// from the outside — through a ledger file that the tasks append to, the
// Redis keys, the exit codes and the processes' own output.
//
// Run them with `go test -race -count=1 ./integration/...`. They need
// redis-server on PATH; without it they skip, except under CI=true, where
// they fail (see package redistest). SLOTD_IT_RACE=1 builds the daemon
// itself with -race too, and any data race it reports fails the test.
package integration
