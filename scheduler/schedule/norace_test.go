//go:build !race

package schedule

// underRace: see race_test.go.
const underRace = false
