package main

import (
	"bufio"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/hoardproject/hoard/queues"
	"github.com/hoardproject/hoard/server"
)

// failedCommand works with a project's failed items: those claimed
// max_claims times without a done, and those their claimant reported
// failed (docs/failed-items.md).
func failedCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "failed", Short: "List, export, requeue and delete failed items"}
	cmd.AddCommand(failedListCommand(), failedExportCommand(),
		failedMoveCommand("requeue", "Put failed items back in a queue, their claim count reset"),
		failedMoveCommand("delete", "Remove failed items for good"))
	return cmd
}

func failedListCommand() *cobra.Command {
	var limit int
	cmd := &cobra.Command{
		Use:   "list <slug> [--limit N]",
		Short: "List failed items: item, times claimed, failed at, why, the last claimants",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			client := newAdminClient()
			escaper := &controlEscaper{w: cmd.OutOrStdout()}
			tw := tabwriter.NewWriter(escaper, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ITEM\tCLAIMS\tFAILED AT\tWHY\tCLAIMANTS")
			query := url.Values{}
			shown := 0
			for {
				page := queues.MaxFailedPage
				if limit > 0 {
					page = min(page, limit-shown)
				}
				query.Set("limit", strconv.Itoa(page))
				var out server.FailedPage
				if err := client.do(cmd.Context(), http.MethodGet, "/projects/"+url.PathEscape(args[0])+"/failed?"+query.Encode(), nil, &out); err != nil {
					return err
				}
				for _, f := range out.Failed {
					why := f.Reason
					if f.Message != "" {
						why += ": " + strings.ReplaceAll(f.Message, "\t", " ")
					}
					var by []string
					for _, h := range f.History {
						by = append(by, h.By+" ("+h.Ended+")")
					}
					fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", f.Item, f.Claims, f.At.UTC().Format(time.DateTime), why, strings.Join(by, ", "))
				}
				shown += len(out.Failed)
				if out.Next == "" || (limit > 0 && shown >= limit) {
					break
				}
				query.Set("cursor", out.Next)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if err := escaper.Close(); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "%d failed items\n", shown)
			return nil
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 0, "show at most this many (0 = all)")
	return cmd
}

func failedExportCommand() *cobra.Command {
	return exportCommand("export <slug>",
		"Write every failed item as a JSON line: item, claims, at, reason, message, history",
		func(args []string) string { return "/projects/" + url.PathEscape(args[0]) + "/failed/export" }, 1)
}

// failedMoveCommand is requeue or delete: items named as arguments, in a
// file (one per line, "-" = stdin), or --all.
func failedMoveCommand(verb, short string) *cobra.Command {
	var all bool
	var file, queue string
	cmd := &cobra.Command{
		Use:   verb + " <slug> [item ...] [--file F] [--all]",
		Short: short,
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			items := args[1:]
			if file != "" {
				more, err := readItemLines(file)
				if err != nil {
					return err
				}
				items = append(items, more...)
			}
			if all == (len(items) > 0) {
				return errors.New("name the items (as arguments or with --file), or give --all for every failed item")
			}
			req := server.FailedRequest{Items: items, All: all}
			if verb == "requeue" {
				req.Queue = queue
			}
			var out queues.FailedMoveResult
			if err := newAdminClient().do(cmd.Context(), http.MethodPost, "/projects/"+url.PathEscape(args[0])+"/failed/"+verb, req, &out); err != nil {
				return err
			}
			done := map[string]string{"requeue": "requeued to " + queue, "delete": "deleted"}[verb]
			fmt.Fprintf(cmd.OutOrStdout(), "%d failed items %s", out.Moved, done)
			if out.NotFailed > 0 {
				fmt.Fprintf(cmd.OutOrStdout(), " (%d named were not failed; left alone)", out.NotFailed)
			}
			fmt.Fprintln(cmd.OutOrStdout())
			return nil
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "every failed item")
	cmd.Flags().StringVar(&file, "file", "", "read items from this file, one per line (- = stdin)")
	if verb == "requeue" {
		cmd.Flags().StringVar(&queue, "queue", "todo", "queue to put them in: todo, backfeed, secondary or redo")
	}
	return cmd
}

// readItemLines reads one item per line, skipping blank lines.
func readItemLines(path string) ([]string, error) {
	in := os.Stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		in = f
	}
	var items []string
	scanner := bufio.NewScanner(in)
	scanner.Buffer(make([]byte, 64<<10), queues.MaxItemBytes+2)
	for scanner.Scan() {
		if line := strings.TrimSuffix(scanner.Text(), "\r"); line != "" {
			items = append(items, line)
		}
	}
	return items, scanner.Err()
}
