package main

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

// btMetricsCommand is `hoard bt metrics`: the unique-IP metrics (seed
// 002) through GET /api/v1/bittorrent/metrics.
func btMetricsCommand() *cobra.Command {
	var (
		month, torrent string
		top, months    int
	)
	cmd := &cobra.Command{
		Use:   "metrics [--month YYYY-MM] [--torrent INFOHASH] [-n 20] [--months 12]",
		Short: "Show unique users (IPs, each counted at most once per 30 days) per month, country, city and postcode",
		Long: `Show the unique-IP metrics: users per month for the last --months months,
then users per country, city and postcode (the top -n of each) for all
time or for --month, across all torrents or for --torrent. An IP counts
in a metric at most once per 30 days (a rolling window), in the month it
was counted in; see docs/bittorrent-metrics.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			query := url.Values{"top": {strconv.Itoa(top)}, "months": {strconv.Itoa(months)}}
			if month != "" {
				query.Set("month", month)
			}
			if torrent != "" {
				query.Set("torrent", torrent)
			}
			var r btMetricsReport
			if err := newAdminClient().do(cmd.Context(), http.MethodGet, "/bittorrent/metrics?"+query.Encode(), nil, &r); err != nil {
				return err
			}
			scope, period := "all torrents", "all time"
			if r.Torrent != "" {
				scope = "torrent " + r.Torrent
			}
			if r.Month != "" {
				period = r.Month
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintf(w, "users (%s, %s)\t%d\n", scope, period, r.Users)
			fmt.Fprintf(w, "\nMONTH\tUSERS\n")
			for _, m := range r.Months {
				fmt.Fprintf(w, "%s\t%d\n", m.Month, m.Users)
			}
			fmt.Fprintf(w, "\nCOUNTRY\tUSERS\n")
			for _, p := range r.Countries {
				fmt.Fprintf(w, "%s\t%d\n", p.Country, p.Users)
			}
			for _, list := range []struct {
				title  string
				places []btPlaceCount
			}{{"CITY", r.Cities}, {"POSTCODE", r.Postcodes}} {
				fmt.Fprintf(w, "\nCOUNTRY\t%s\tUSERS\n", list.title)
				for _, p := range list.places {
					fmt.Fprintf(w, "%s\t%s\t%d\n", p.Country, p.Name, p.Users)
				}
			}
			return w.Flush()
		},
	}
	f := cmd.Flags()
	f.StringVar(&month, "month", "", "one calendar month, YYYY-MM (UTC); default all time")
	f.StringVar(&torrent, "torrent", "", "one torrent's metrics (40 hex characters)")
	f.IntVarP(&top, "count", "n", btDefaultMetricsTop, fmt.Sprintf("countries, cities and postcodes to list (1-%d)", btMaxMetricsTop))
	f.IntVar(&months, "months", btDefaultMetricsMonths, fmt.Sprintf("months of users per month (1-%d)", btMaxMetricsMonths))
	return cmd
}
