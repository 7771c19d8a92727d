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
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := benchCommand()
	root.Use = "hoard-bench"
	root.SilenceUsage, root.SilenceErrors = true, true
	// Every figure is printed under the command that made it and the
	// machine it ran on (its load included: the machine is shared). `load`
	// is left out: its stdout is the report its parent reads.
	root.PersistentPreRun = func(cmd *cobra.Command, _ []string) {
		if cmd.Name() == "load" {
			return
		}
		fmt.Printf("$ hoard-bench %s\n%s\n", strings.Join(os.Args[1:], " "), machineLine())
	}
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "hoard-bench:", err)
		os.Exit(1)
	}
}
