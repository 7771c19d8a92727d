//go:build !race

package callbatch_test

const raceEnabled = false
