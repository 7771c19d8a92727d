package main

import (
	"fmt"
	"net/http"
	"net/url"

	"github.com/spf13/cobra"
)

// jobCommand is `hoard job`: a plugin's scheduled jobs.
func jobCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "job", Short: "Run a plugin's scheduled job (the scorer, the reaper, orphan cleanup) now"}
	cmd.AddCommand(&cobra.Command{
		Use:   "run <plugin> <job>",
		Short: "Run a plugin's job now instead of waiting for its period; it counts as the period's run",
		Long: `Run a plugin's job now (POST /api/v1/jobs/<plugin>/<job>/run) and wait
for it: for example "hoard job run bittorrent reaper" after a policy
change. It runs between the job's scheduled runs, on the frontend the CLI
talks to, whoever ran it this period, and the next scheduled run is a
period later.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := "/jobs/" + url.PathEscape(args[0]) + "/" + url.PathEscape(args[1]) + "/run"
			if err := newAdminClient().do(cmd.Context(), http.MethodPost, path, nil, nil); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "ran job %s of plugin %s\n", args[1], args[0])
			return nil
		},
	})
	return cmd
}
