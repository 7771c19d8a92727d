// Command hoard is the one binary operators run: the server (serve), the
// admin CLI (project, queue, claims). The load generators are
// cmd/hoard-bench.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := rootCommand().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "hoard:", err)
		os.Exit(1)
	}
}

func rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "hoard",
		Short:         "hoard: an Archiveteam-style work-queue tracker and BitTorrent swarm tracker",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       currentBuild().String(),
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.AddCommand(serveCommand(), projectCommand(), queueCommand(), claimsCommand(), failedCommand(), filtersCommand(), limitsCommand(),
		blockCommand(), unblockCommand(), blocksCommand(), logCommand(), archiveCommand(), segmentsCommand(), btCommand(), jobCommand(),
		doctorCommand(), accountCommand(), tokenCommand(), configCommand())
	strictCommands(root)
	return root
}

// envOr returns the environment variable's value, or def when unset.
func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return def
}
