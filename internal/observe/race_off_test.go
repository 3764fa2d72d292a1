//go:build !race

package observe_test

// raceDetector: timings and allocations mean nothing under it.
const raceDetector = false
