package main

import (
	"fmt"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/hoardproject/hoard/queues"
	"github.com/hoardproject/hoard/server"
)

func claimsCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "claims", Short: "Work with items that are out"}
	var olderThan time.Duration
	var downloader string
	release := &cobra.Command{
		Use:   "release <slug>",
		Short: "Put claimed items back in todo:redo (all, or those matching the filters)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var out queues.ReleaseResult
			req := server.ReleaseRequest{OlderThan: queues.Duration(olderThan), Downloader: downloader}
			if err := newAdminClient().do(cmd.Context(), http.MethodPost, "/projects/"+args[0]+"/claims/release", req, &out); err != nil {
				return err
			}
			fmt.Printf("released %d claims to todo:redo (%d out claims kept by the filter)\n", out.Released, out.Filtered)
			return nil
		},
	}
	release.Flags().DurationVar(&olderThan, "older-than", 0, "only claims at least this old, e.g. 6h")
	release.Flags().StringVar(&downloader, "downloader", "", "only this downloader's claims")
	cmd.AddCommand(release)
	return cmd
}
