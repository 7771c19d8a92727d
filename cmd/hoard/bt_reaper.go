package main

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

// btReaperCommand is `hoard bt reaper`: the unseeded reaper's extensions,
// preview, counts and torrents through the admin API
// (/api/v1/bittorrent/reaper), and the events it hands the site (the
// outbox, /api/v1/bittorrent/outbox).
func btReaperCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "reaper", Short: "The unseeded reaper: extend a grace period, preview the next run, counts, a torrent's state, the events it hands the site"}
	cmd.AddCommand(btReaperExtendCommand(), btReaperPreviewCommand(), btReaperCountsCommand(), btReaperShowCommand(), btReaperEventsCommand())
	return cmd
}

func btReaperExtendCommand() *cobra.Command {
	var (
		days int
		user string
	)
	cmd := &cobra.Command{
		Use:   "extend (<infohash> | --user U) --days N",
		Short: "Give a torrent (or every upload of a user) in the reaper's process N more days before its next step",
		Long: `Moves the torrent's unseeded_date N days into the future (from now, or from
its unseeded_date if that is later): the final notice and the removal move
with it, and the steps already queued for it do nothing. Only torrents that
have had a notice can be extended. Logged in the admin log with $HOARD_ACTOR.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var req btExtendRequest
			switch {
			case len(args) == 1 && user != "":
				return fmt.Errorf("name a torrent or --user, not both")
			case len(args) == 1:
				req.InfoHash = args[0]
			case user != "":
				req.User = user
			default:
				return fmt.Errorf("name a torrent (its info-hash) or --user U")
			}
			if days < 1 || days > btMaxExtensionDays {
				return fmt.Errorf("--days %d: want a whole number from 1 to %d", days, btMaxExtensionDays)
			}
			req.Days = []byte(strconv.Itoa(days))
			var reply btExtendReply
			if err := newAdminClient().do(cmd.Context(), http.MethodPost, "/bittorrent/reaper/extend", req, &reply); err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			for _, e := range reply.Extended {
				fmt.Fprintf(w, "extended %s by %d days (%s notice): unseeded_date %s\n", e.InfoHash, reply.Days, e.Notify,
					e.UnseededDate.Format(time.RFC3339))
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&days, "days", 0, fmt.Sprintf("days to add (1-%d)", btMaxExtensionDays))
	_ = cmd.MarkFlagRequired("days")
	cmd.Flags().StringVar(&user, "user", "", "extend every upload of this uploader that is in the reaper's process")
	return cmd
}

func btReaperPreviewCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "preview",
		Short: "Show what the reaper's next run would do, changing nothing",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var p btReaperPreview
			if err := newAdminClient().do(cmd.Context(), http.MethodGet, "/bittorrent/reaper/preview", nil, &p); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "a run at %s would queue %d steps for %d uploaders; %d due in all, %d left to later runs by the caps\n",
				p.At.Format(time.RFC3339), len(p.Steps), p.Users, p.Due, p.LeftOver)
			if len(p.Steps) > 0 {
				w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "STEP\tINFO_HASH\tTORRENT\tUPLOADER\tSTATE\tDUE_SINCE")
				for _, s := range p.Steps {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", s.Step, s.InfoHash, s.TorrentID, s.Uploader, s.State, s.DueSince.Format(time.RFC3339))
				}
				_ = w.Flush()
			}
			for _, r := range p.Rewards {
				fmt.Fprintf(out, "reward %s: %s (%g points each)\n", r.InfoHash, strings.Join(r.Users, ", "), r.Points)
			}
			return nil
		},
	}
}

func btReaperCountsCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "counts",
		Short: "Show the torrents in each reaper state (at its last run) and the steps it has done",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var c btReaperCounts
			if err := newAdminClient().do(cmd.Context(), http.MethodGet, "/bittorrent/reaper/counts", nil, &c); err != nil {
				return err
			}
			n := func(v int64) string { return strconv.FormatInt(v, 10) }
			counted := "never (no run yet)"
			if !c.CountedAt.IsZero() {
				counted = c.CountedAt.Format(time.RFC3339)
			}
			printRows(cmd.OutOrStdout(), [][2]string{
				{"counted_at", counted},
				{"never/initial", n(c.NeverInitial)}, {"never/final", n(c.NeverFinal)},
				{"unseeded/initial", n(c.UnseededInitial)}, {"unseeded/final", n(c.UnseededFinal)},
				{"claim_windows", n(c.ClaimWindows)}, {"rewards_waiting", n(c.RewardsWaiting)},
				{"initial_done", n(c.InitialDone)}, {"final_done", n(c.FinalDone)}, {"removed", n(c.Removed)},
				{"invited", n(c.Invited)}, {"claims", n(c.Claims)}, {"rewards", n(c.Rewards)},
				{"extensions", n(c.Extensions)}, {"notices", n(c.Notices)},
			})
			return nil
		},
	}
}

func btReaperShowCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "show <infohash>",
		Short: "Show a torrent's reaper state, its claims and its open invitations",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path, err := btPath("/reaper/torrents/", "info-hash", args[0])
			if err != nil {
				return err
			}
			var r btReaperTorrent
			if err := newAdminClient().do(cmd.Context(), http.MethodGet, path, nil, &r); err != nil {
				return err
			}
			state := r.State + "/" + r.Notify
			if r.State == "" {
				state = "not in the process"
			}
			rows := [][2]string{{"info_hash", r.InfoHash}, {"state", state}, {"unseeded_date", timeOrNever(r.UnseededDate)}}
			if r.ClaimUntil != nil {
				rows = append(rows, [2]string{"claim_until", r.ClaimUntil.Format(time.RFC3339)})
			}
			if r.Pending != "" {
				rows = append(rows, [2]string{"queued", r.Pending})
			}
			for _, c := range r.Claims {
				rewarded := "reward waiting"
				if c.Rewarded {
					rewarded = "rewarded"
				}
				rows = append(rows, [2]string{"claim", fmt.Sprintf("%s at %s (%s)", c.User, c.At.Format(time.RFC3339), rewarded)})
			}
			if len(r.Invited) > 0 {
				rows = append(rows, [2]string{"invited", strings.Join(r.Invited, ", ")})
			}
			printRows(cmd.OutOrStdout(), rows)
			return nil
		},
	}
}
