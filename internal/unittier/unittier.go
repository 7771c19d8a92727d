// Package unittier is the fast test tier's one rule. Under go test -short
// (make unit) a test that needs a real Redis, builds and runs binaries or
// drives a browser skips, saying why, so the tier answers in seconds on a
// machine without redis-server; make test runs every one of them.
package unittier

import "testing"

// Skip skips tb in the unit tier. what says what the test needs that the
// tier does not give. The reason starts with "by design:", so that make
// unit under CI=true does not count it as a missing tool
// (internal/testsummary).
func Skip(tb testing.TB, what string) {
	tb.Helper()
	if testing.Short() {
		tb.Skip("by design: " + what + ", which the unit tier (go test -short, make unit) does not run; make test does")
	}
}
