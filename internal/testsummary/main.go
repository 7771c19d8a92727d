// Command testsummary reads `go test -json` on stdin and prints what a
// whole-suite run should say: one line per package as it finishes, each
// failure with its output, then every skipped test with its reason and
// "N passed, N failed, N skipped". It exits 1 when anything failed, when
// nothing ran, and, under CI=true (or -ci), when a test was skipped for a
// reason that does not start with "by design:": on CI a skip means a real
// client or part (a browser, aria2c, libtorrent, the lua client,
// redis-server, the cluster) is missing, and that must not pass quietly.
//
//	go test -json -race ./... | go run ./internal/testsummary
//
// Counts are of leaf tests: a subtest counts, its parent does not, unless
// the parent itself failed or skipped.
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	ci := flag.Bool("ci", os.Getenv("CI") == "true", "fail on any skip whose reason does not start with \"by design:\" (default: CI=true)")
	flag.Parse()
	report, err := Summarize(os.Stdin, os.Stdout, *ci)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if !report.OK() {
		os.Exit(1)
	}
}
