package main

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"text/tabwriter"
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
	cmd.AddCommand(release, claimsListCommand(), claimsExportCommand())
	return cmd
}

// claimsExportCommand writes the claims out as lines, with the list's filters.
func claimsExportCommand() *cobra.Command {
	var downloader, olderThan string
	export := exportCommand("export <slug> [--downloader NICK] [--older-than DURATION]",
		"Write every item out as lines: item TAB downloader TAB claimed-at (UTC), earliest reclaim deadline first",
		func(args []string) string {
			query := url.Values{}
			if downloader != "" {
				query.Set("downloader", downloader)
			}
			// RunE below checked the age before this runs.
			if age, _ := parseAge(olderThan); age > 0 {
				query.Set("older_than", age.String())
			}
			return "/projects/" + url.PathEscape(args[0]) + "/claims/export?" + query.Encode()
		}, 1)
	run := export.RunE
	export.RunE = func(cmd *cobra.Command, args []string) error {
		if _, err := parseAge(olderThan); err != nil {
			return err
		}
		return run(cmd, args)
	}
	export.Flags().StringVar(&downloader, "downloader", "", "only this downloader's claims")
	export.Flags().StringVar(&olderThan, "older-than", "", "only claims at least this old, e.g. 6h")
	return export
}

// parseAge reads an --older-than value, with an error that says what a
// duration looks like.
func parseAge(raw string) (time.Duration, error) {
	if raw == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(raw)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("--older-than %q is not a duration like 30m, 6h or 2h30m", raw)
	}
	return d, nil
}

// claimsListCommand prints who holds which items, a page of the API at a
// time, so a project with millions out is never held whole.
func claimsListCommand() *cobra.Command {
	var downloader, olderThan string
	var limit int
	cmd := &cobra.Command{
		Use:   "list <slug> [--downloader NICK] [--older-than DURATION]",
		Short: "List who holds which items: item, downloader, claimed at, times claimed, reclaim deadline",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			age, err := parseAge(olderThan)
			if err != nil {
				return err
			}
			query := url.Values{}
			if downloader != "" {
				query.Set("downloader", downloader)
			}
			if age > 0 {
				query.Set("older_than", age.String())
			}
			client := newAdminClient()
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ITEM\tDOWNLOADER\tCLAIMED AT\tTIMES\tDEADLINE")
			shown, cut := 0, false
			for {
				page := server.DefaultClaimsPage
				if limit > 0 {
					// One more than is left to show: whether it comes tells
					// whether the listing is cut short.
					page = min(page, limit-shown+1)
				}
				query.Set("limit", strconv.Itoa(page))
				var out server.ClaimsPage
				if err := client.do(cmd.Context(), http.MethodGet, "/projects/"+url.PathEscape(args[0])+"/claims?"+query.Encode(), nil, &out); err != nil {
					return err
				}
				claims := out.Claims
				if limit > 0 && len(claims) > limit-shown {
					claims, cut = claims[:limit-shown], true
				}
				for _, c := range claims {
					deadline := "-"
					if !c.Deadline.IsZero() {
						deadline = c.Deadline.UTC().Format(time.DateTime)
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", c.Item, c.Downloader, c.ClaimedAt.UTC().Format(time.DateTime), c.TimesClaimed, deadline)
				}
				shown += len(claims)
				if cut || out.Next == "" {
					break
				}
				query.Set("cursor", out.Next)
				if err := tw.Flush(); err != nil {
					return err
				}
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if cut {
				// A listing cut short says so: the count alone reads as all.
				fmt.Fprintf(cmd.ErrOrStderr(), "%d claims shown; cut short by --limit %d: there are more (--limit 0 lists all)\n", shown, limit)
				return nil
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "%d claims\n", shown)
			return nil
		},
	}
	cmd.Flags().StringVar(&downloader, "downloader", "", "only this downloader's claims")
	cmd.Flags().StringVar(&olderThan, "older-than", "", "only claims at least this old, e.g. 6h")
	cmd.Flags().IntVar(&limit, "limit", 0, "show at most this many (0 = all)")
	return cmd
}
