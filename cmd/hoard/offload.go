package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/hoardproject/hoard/queues"
	"github.com/hoardproject/hoard/server"
)

// stream GETs an export and copies it to w; it fails unless the server's
// trailer confirms the whole export arrived.
func (a *adminClient) stream(ctx context.Context, path string, w io.Writer) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.base+"/api/v1"+path, nil)
	if err != nil {
		return 0, err
	}
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	// No overall timeout: a big export takes as long as it takes.
	resp, err := (&http.Client{}).Do(req)
	if err != nil {
		return 0, fmt.Errorf("cannot reach hoard at %s (set HOARD_URL): %w", a.base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return 0, a.replyError(resp)
	}
	if _, err := io.Copy(w, resp.Body); err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(resp.Trailer.Get(server.ExportItemsTrailer), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("the export was cut short (no %s trailer): do not use its output", server.ExportItemsTrailer)
	}
	return n, nil
}

func exportCommand(use, short string, path func(args []string) string, nargs int) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(nargs),
		RunE: func(cmd *cobra.Command, args []string) error {
			w := cmd.OutOrStdout()
			toFile := output != "" && output != "-"
			if toFile {
				file, err := os.Create(output)
				if err != nil {
					return err
				}
				defer file.Close()
				w = file
			}
			escaper := &controlEscaper{w: w}
			n, err := newAdminClient().stream(cmd.Context(), path(args), escaper)
			if err == nil {
				err = escaper.Close()
			}
			if err != nil {
				if toFile {
					_ = os.Remove(output) // never leave a partial export behind
				}
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "exported %d items\n", n)
			if escaper.Escaped > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: %d control characters (in items stored before hoard refused them) were written as \\xNN or \\u00NN escapes; such items cannot be queued again as they are\n", escaper.Escaped)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "-", "write to this file instead of stdout")
	return cmd
}

func queueExportCommand() *cobra.Command {
	return exportCommand("export <slug> <queue>",
		"Write every item of a queue, in Redis and offloaded, one per line (hoard queue add reads it back)",
		func(args []string) string { return "/projects/" + args[0] + "/queues/" + args[1] + "/export" }, 2)
}

func archiveCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "archive", Short: "Done items archived by done_mode archive"}
	cmd.AddCommand(exportCommand("export <slug>", "Write every archived completion, one per line",
		func(args []string) string { return "/projects/" + args[0] + "/archive/export" }, 1))
	return cmd
}

func segmentsCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "segments", Short: "Offloaded segment files of a project"}
	cmd.AddCommand(&cobra.Command{
		Use:   "list <slug>",
		Short: "List the segment records: state, queue, items, owning node",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var out struct {
				Segments []queues.Segment `json:"segments"`
			}
			if err := newAdminClient().do(cmd.Context(), http.MethodGet, "/projects/"+args[0]+"/segments", nil, &out); err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSTATE\tQUEUE\tITEMS\tNODE\tCREATED")
			for _, s := range out.Segments {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", s.ID, s.State, s.Queue, s.Count, s.Node, s.Created.UTC().Format("2006-01-02 15:04:05"))
			}
			return tw.Flush()
		},
	})
	var from, to string
	move := &cobra.Command{
		Use:   "move <slug> --from <queue> --to <queue>",
		Short: "Move offloaded segments to another queue (the items follow when refilled)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var out struct {
				Moved int64 `json:"moved"`
			}
			req := server.SegmentMoveRequest{From: from, To: to}
			if err := newAdminClient().do(cmd.Context(), http.MethodPost, "/projects/"+args[0]+"/segments/move", req, &out); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "moved %d offloaded items from %s to %s\n", out.Moved, from, to)
			return nil
		},
	}
	move.Flags().StringVar(&from, "from", "", "the queue the segments belong to")
	move.Flags().StringVar(&to, "to", "", "the queue to move them to")
	_ = move.MarkFlagRequired("from")
	_ = move.MarkFlagRequired("to")
	cmd.AddCommand(move)
	return cmd
}
