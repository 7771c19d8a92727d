//go:build race

package callbatch_test

// raceEnabled: the race detector's sync.Pool drops some of what it is
// given, so allocation counts mean nothing under it.
const raceEnabled = true
