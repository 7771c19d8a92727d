// Command hoard-bench is hoard's load generators, kept out of the binary
// operators run: each starts its own redis-server, and a hoard server on
// loopback in-process, and prints its figures (docs/figures.md). `make
// bench` runs them.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := benchCommand()
	root.Use = "hoard-bench"
	root.SilenceUsage, root.SilenceErrors = true, true
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "hoard-bench:", err)
		os.Exit(1)
	}
}
