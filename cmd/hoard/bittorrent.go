package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

// btCommand is `hoard bt`: the BitTorrent tracker's torrents, passkeys
// and client whitelist, through the admin API (/api/v1/bittorrent).
func btCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bt",
		Short: "Manage the BitTorrent tracker: torrents, passkeys, the client whitelist, stats",
		Long: `Manage the BitTorrent tracker through the admin API at $HOARD_URL.

Changes reach the tracker frontends within their cache time (10s) for
passkeys and the whitelist, at once for torrents.`,
	}
	cmd.AddCommand(btTorrentCommand(), btUserCommand(), btClientCommand(), btClientsCommand(), btDenyCommand(), btStatsCommand(), btTopCommand(),
		btReaperCommand(), btOutboxCommand(), btMetricsCommand(), btTrackerCommand(), btScoreCommand())
	return cmd
}

func btTorrentCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "torrent", Short: "Register, unregister and show torrents"}
	var id, uploader, created string
	var value float64
	var trackers trackerFlags
	add := &cobra.Command{
		Use:   "add <infohash> --id N [--uploader U] [--created RFC3339] [--value V] [--tracker URL [--tracker-max N]]...",
		Short: "Register a torrent under the site's torrent id (again: change its id)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var reply btRegisterTorrentReply
			path, err := btPath("/torrents/", "info-hash", args[0])
			if err != nil {
				return err
			}
			body := map[string]any{"id": id}
			if value != 0 {
				body["value"] = value
			}
			if len(trackers.urls) > 0 || len(trackers.max) > 0 {
				list, err := trackers.list()
				if err != nil {
					return err
				}
				body["trackers"] = list
			}
			if uploader != "" {
				body["uploader"] = uploader
			}
			if created != "" {
				if _, err := time.Parse(time.RFC3339, created); err != nil {
					return fmt.Errorf("--created %q: want an RFC 3339 time such as 2026-03-01T12:00:00Z", created)
				}
				body["created"] = created
			}
			err = newAdminClient().do(cmd.Context(), http.MethodPut, path, body, &reply)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			switch reply.PreviousID {
			case "":
				fmt.Fprintf(w, "registered %s as torrent %s\n", reply.InfoHash, reply.ID)
			default:
				fmt.Fprintf(w, "registered %s as torrent %s (was %s)\n", reply.InfoHash, reply.ID, reply.PreviousID)
			}
			for _, t := range reply.Trackers {
				fmt.Fprintf(w, "external tracker %s (max peers %d)\n", t.URL, t.MaxPeers)
			}
			return nil
		},
	}
	add.Flags().StringVar(&id, "id", "", "the site's torrent id (required)")
	_ = add.MarkFlagRequired("id")
	add.Flags().StringVar(&uploader, "uploader", "", "the site's user id of the uploader (the reaper notifies them)")
	add.Flags().Float64Var(&value, "value", 0, "what the upload is worth (e.g. its size in GiB): the reaper rewards a reseed with reward_factor x value (default 1)")
	add.Flags().StringVar(&created, "created", "", "the upload's creation time, RFC 3339 (default: now, at the first registration)")
	trackers.register(add, "; given, they replace the torrent's external trackers")
	var reason string
	remove := &cobra.Command{
		Use:   "remove <infohash> [--reason R]",
		Short: "Unregister a torrent: announces are refused (with the reason, if given, for deleted_reason_ttl), its peers time out",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var reply struct {
				InfoHash       string     `json:"info_hash"`
				UnregisteredID string     `json:"unregistered_id"`
				Reason         string     `json:"reason"`
				ReasonUntil    *time.Time `json:"reason_until"`
			}
			path, err := btPath("/torrents/", "info-hash", args[0])
			if err != nil {
				return err
			}
			var body any
			if reason != "" {
				body = map[string]string{"reason": reason}
			}
			err = newAdminClient().do(cmd.Context(), http.MethodDelete, path, body, &reply)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "unregistered %s (torrent %s); its peers leave as their announces time out\n",
				reply.InfoHash, reply.UnregisteredID)
			if reply.Reason != "" && reply.ReasonUntil != nil {
				fmt.Fprintf(cmd.OutOrStdout(), "its announces read \"torrent deleted: %s\" until %s\n", reply.Reason, reply.ReasonUntil.Format(time.RFC3339))
			}
			return nil
		},
	}
	remove.Flags().StringVar(&reason, "reason", "", `the reason clients read, e.g. "Trumped" or "Dupe" (1-200 bytes)`)
	show := &cobra.Command{
		Use:   "show <infohash>",
		Short: "Show a torrent's record: id, counts, times",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var t btTorrentRecord
			path, err := btPath("/torrents/", "info-hash", args[0])
			if err != nil {
				return err
			}
			err = newAdminClient().do(cmd.Context(), http.MethodGet, path, nil, &t)
			if err != nil {
				return err
			}
			id := t.ID
			if !t.Registered {
				id = "(not registered)"
			}
			uploader := t.Uploader
			if uploader == "" {
				uploader = "(not given)"
			}
			printRows(cmd.OutOrStdout(), [][2]string{
				{"info_hash", t.InfoHash}, {"id", id}, {"uploader", uploader},
				{"created", timeOrNever(t.Created)}, {"last_action", timeOrNever(t.LastAction)},
				{"seeders", strconv.FormatInt(t.Seeders, 10)}, {"leechers", strconv.FormatInt(t.Leechers, 10)},
				{"snatches", strconv.FormatInt(t.Snatches, 10)}, {"announces", strconv.FormatInt(t.Announces, 10)},
			})
			return nil
		},
	}
	cmd.AddCommand(add, remove, show)
	return cmd
}

func btUserCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "user", Short: "Add and remove passkeys, show what the tracker knows of a user"}
	var userID string
	add := &cobra.Command{
		Use:   "add <passkey> --user-id U",
		Short: "Map a passkey to the site's user id (replaces any previous mapping)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var reply btUserChangeReply
			path, err := btPath("/users/", "passkey", args[0])
			if err != nil {
				return err
			}
			err = newAdminClient().do(cmd.Context(), http.MethodPut, path, map[string]string{"user_id": userID}, &reply)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "passkey %s now belongs to user %s\n", reply.Passkey, reply.UserID)
			return nil
		},
	}
	add.Flags().StringVar(&userID, "user-id", "", "the site's user id (required)")
	_ = add.MarkFlagRequired("user-id")
	remove := &cobra.Command{
		Use:   "remove <passkey>",
		Short: "Forget a passkey (the user's records stay); an unknown passkey is not an error",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var reply btUserChangeReply
			path, err := btPath("/users/", "passkey", args[0])
			if err != nil {
				return err
			}
			err = newAdminClient().do(cmd.Context(), http.MethodDelete, path, nil, &reply)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "passkey %s removed\n", reply.Passkey)
			return nil
		},
	}
	show := &cobra.Command{
		Use:   "show <user_id>",
		Short: "Show a user's torrents (active, complete, incomplete, hit-and-run) and transfer totals",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var u btTrackerUser
			path, err := btPath("/users/by-id/", "user id", args[0])
			if err != nil {
				return err
			}
			err = newAdminClient().do(cmd.Context(), http.MethodGet, path, nil, &u)
			if err != nil {
				return err
			}
			ids := func(list []string) string {
				if len(list) == 0 {
					return "0"
				}
				return fmt.Sprintf("%d: %s", len(list), strings.Join(list, " "))
			}
			printRows(cmd.OutOrStdout(), [][2]string{
				{"user_id", u.UserID},
				{"uploaded", strconv.FormatInt(u.Uploaded, 10) + " bytes"},
				{"downloaded", strconv.FormatInt(u.Downloaded, 10) + " bytes"},
				{"active", ids(u.Active)}, {"complete", ids(u.Complete)},
				{"incomplete", ids(u.Incomplete)}, {"hnr", ids(u.HnR)},
			})
			return nil
		},
	}
	cmd.AddCommand(add, remove, show)
	return cmd
}

// prefixAfterDashes explains a refused flag: Azureus-style prefixes start
// with '-', which cobra reads as a flag unless it comes after --.
func prefixAfterDashes(cmd *cobra.Command, err error) error {
	return fmt.Errorf("%w (a prefix that starts with '-' goes after --: hoard bt client %s [--name NAME] -- -TR3)", err, cmd.Name())
}

func btClientCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "client",
		Short: "Whitelist peer_id prefixes (see hoard bt clients)",
		Long: `Whitelist peer_id prefixes: in private mode the tracker admits only clients
whose peer_id starts with a whitelisted prefix. A prefix that starts with '-'
(Azureus style) goes after --, e.g.:

  hoard bt client add --name "Transmission 3" -- -TR3
  hoard bt client remove -- -TR3`,
	}
	var name string
	add := &cobra.Command{
		Use:   "add [--name NAME] [--] <prefix>",
		Short: "Whitelist a peer_id prefix (1-20 bytes)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var reply btWhitelistedClient
			err := newAdminClient().do(cmd.Context(), http.MethodPut, "/bittorrent/clients/"+url.PathEscape(args[0]),
				btAddClientRequest{Name: name}, &reply)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "whitelisted %s %s\n", strconv.Quote(reply.Prefix), reply.Name)
			return nil
		},
	}
	add.Flags().StringVar(&name, "name", "", "the client's readable name, e.g. \"Transmission 3\"")
	add.SetFlagErrorFunc(prefixAfterDashes)
	remove := &cobra.Command{
		Use:   "remove [--] <prefix>",
		Short: "Take a peer_id prefix off the whitelist",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var reply btWhitelistedClient
			err := newAdminClient().do(cmd.Context(), http.MethodDelete, "/bittorrent/clients/"+url.PathEscape(args[0]), nil, &reply)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "removed %s %s from the whitelist\n", strconv.Quote(reply.Prefix), reply.Name)
			return nil
		},
	}
	remove.SetFlagErrorFunc(prefixAfterDashes)
	cmd.AddCommand(add, remove)
	return cmd
}

func btClientsCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "clients",
		Short: "List the client whitelist (warns when it is empty)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var reply btClientsReply
			if err := newAdminClient().do(cmd.Context(), http.MethodGet, "/bittorrent/clients", nil, &reply); err != nil {
				return err
			}
			if len(reply.Clients) == 0 {
				fmt.Fprintln(cmd.ErrOrStderr(), "warning: "+reply.Warning)
				return nil
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "PREFIX\tNAME")
			for _, c := range reply.Clients {
				fmt.Fprintf(w, "%s\t%s\n", strconv.Quote(c.Prefix), c.Name)
			}
			return w.Flush()
		},
	}
}

func btStatsCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "stats",
		Short: "Show the tracker's global counters (they lag by the flush interval)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var s btSwarmStats
			if err := newAdminClient().do(cmd.Context(), http.MethodGet, "/bittorrent/stats", nil, &s); err != nil {
				return err
			}
			n := func(v int64) string { return strconv.FormatInt(v, 10) }
			printRows(cmd.OutOrStdout(), [][2]string{
				{"seeders", n(s.Seeders)}, {"leechers", n(s.Leechers)}, {"snatches", n(s.Snatches)},
				{"announces", n(s.Announces)}, {"scrapes", n(s.Scrapes)}, {"requests", n(s.Requests)},
			})
			return nil
		},
	}
}

func btTopCommand() *cobra.Command {
	var (
		by    string
		count int
	)
	cmd := &cobra.Command{
		Use:   "top [--by seeders|leechers|snatches] [-n 10]",
		Short: "List the torrents with the most seeders, leechers or snatches",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			query := url.Values{"by": {by}, "n": {strconv.Itoa(count)}}
			var reply btTopReply
			if err := newAdminClient().do(cmd.Context(), http.MethodGet, "/bittorrent/top?"+query.Encode(), nil, &reply); err != nil {
				return err
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintf(w, "#\tINFO_HASH\t%s\n", strings.ToUpper(reply.By))
			for i, t := range reply.Torrents {
				fmt.Fprintf(w, "%d\t%s\t%d\n", i+1, t.InfoHash, t.Count)
			}
			return w.Flush()
		},
	}
	cmd.Flags().StringVar(&by, "by", "seeders", "seeders, leechers or snatches")
	cmd.Flags().IntVarP(&count, "count", "n", btDefaultTopCount, fmt.Sprintf("how many torrents (1-%d)", btMaxTopCount))
	return cmd
}

// btPath is the admin path of one torrent or user. Their names never hold
// a '/', and an escaped one would reach the router as a path separator
// (and a "no such endpoint"), so it is refused here with the reason.
func btPath(collection, what, name string) (string, error) {
	if strings.Contains(name, "/") {
		return "", fmt.Errorf("a %s may not contain '/'", what)
	}
	return "/bittorrent" + collection + url.PathEscape(name), nil
}

// printRows prints name/value pairs in two aligned columns.
func printRows(out io.Writer, rows [][2]string) {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	for _, row := range rows {
		fmt.Fprintf(w, "%s\t%s\n", row[0], row[1])
	}
	_ = w.Flush()
}

func timeOrNever(t *time.Time) string {
	if t == nil {
		return "never"
	}
	return t.Format(time.RFC3339)
}

// btReaperEventsCommand is `hoard bt reaper events`: the outbox's pending
// events, for a site that polls, one JSON object per line.
func btReaperEventsCommand() *cobra.Command {
	var (
		after string
		limit int
		ack   bool
	)
	cmd := &cobra.Command{
		Use:   "events [--after ID] [--limit N] [--ack]",
		Short: "List the events waiting for the site (reaper notices, removals, claims, rewards); --ack marks them delivered",
		Long: `List the outbox's pending events after the cursor, in id order, one JSON
object per line (id, idempotency_key, kind, at, body). The cursor for the
next call is printed on stderr. With --ack the listed events are marked
delivered after they are printed, so the next call without --after starts
after them; a site that processes the lines first acknowledges by hand:
POST /api/v1/bittorrent/outbox/ack {"ids": [...]}.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 1 || limit > btMaxOutboxLimit {
				return fmt.Errorf("--limit %d: want 1 to %d", limit, btMaxOutboxLimit)
			}
			query := url.Values{"after": {after}, "limit": {strconv.Itoa(limit)}}
			client := newAdminClient()
			var page btOutboxEventsReply
			if err := client.do(cmd.Context(), http.MethodGet, "/bittorrent/outbox/events?"+query.Encode(), nil, &page); err != nil {
				return err
			}
			out := json.NewEncoder(cmd.OutOrStdout())
			ids := make([]string, 0, len(page.Events))
			for _, e := range page.Events {
				if err := out.Encode(e); err != nil {
					return err
				}
				ids = append(ids, strconv.FormatUint(e.ID, 10))
			}
			pending := page.Counts.Pending
			if ack && len(ids) > 0 {
				var change btOutboxChangeReply
				if err := client.do(cmd.Context(), http.MethodPost, "/bittorrent/outbox/ack", map[string][]string{"ids": ids}, &change); err != nil {
					return fmt.Errorf("the events were listed but not acknowledged: %w", err)
				}
				pending = change.Counts.Pending
				if change.AlreadyAcknowledged > 0 {
					fmt.Fprintf(cmd.ErrOrStderr(), "acknowledged %d events (%d were already)\n", change.Acknowledged, change.AlreadyAcknowledged)
				} else {
					fmt.Fprintf(cmd.ErrOrStderr(), "acknowledged %d events\n", change.Acknowledged)
				}
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "next: --after %s (%d pending, %d dead)\n", page.Next, pending, page.Counts.Dead)
			return nil
		},
	}
	cmd.Flags().StringVar(&after, "after", "", "the id of the last event already seen (default: from the first)")
	cmd.Flags().IntVar(&limit, "limit", btDefaultOutboxLimit, fmt.Sprintf("the most events to list (1-%d)", btMaxOutboxLimit))
	cmd.Flags().BoolVar(&ack, "ack", false, "mark the listed events delivered")
	return cmd
}

// btOutboxCommand is `hoard bt outbox`: the outbox's counts and its dead
// events, for operators.
func btOutboxCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "outbox", Short: "The outbox of events for the site: counts, dead events, retries"}
	stats := &cobra.Command{
		Use:   "stats",
		Short: "Show the outbox's sizes and counters",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var c btOutboxCounts
			if err := newAdminClient().do(cmd.Context(), http.MethodGet, "/bittorrent/outbox/stats", nil, &c); err != nil {
				return err
			}
			n := func(v int64) string { return strconv.FormatInt(v, 10) }
			printRows(cmd.OutOrStdout(), [][2]string{
				{"pending", n(c.Pending)}, {"dead", n(c.Dead)}, {"delivered", n(c.Delivered)}, {"kept", n(c.Kept)},
				{"appended", n(c.Appended)}, {"duplicates", n(c.Duplicates)}, {"attempts", n(c.Attempts)},
				{"failures", n(c.Failures)}, {"died", n(c.Died)}, {"retried", n(c.Retried)},
			})
			return nil
		},
	}
	var after string
	var limit int
	dead := &cobra.Command{
		Use:   "dead [--after ID] [--limit N]",
		Short: "List the events whose delivery attempts ran out, with their last error (one JSON object per line)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			query := url.Values{"after": {after}, "limit": {strconv.Itoa(limit)}}
			var page btOutboxEventsReply
			if err := newAdminClient().do(cmd.Context(), http.MethodGet, "/bittorrent/outbox/dead?"+query.Encode(), nil, &page); err != nil {
				return err
			}
			out := json.NewEncoder(cmd.OutOrStdout())
			for _, e := range page.Events {
				if err := out.Encode(e); err != nil {
					return err
				}
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "next: --after %s (%d dead)\n", page.Next, page.Counts.Dead)
			return nil
		},
	}
	dead.Flags().StringVar(&after, "after", "", "the id of the last dead event already seen")
	dead.Flags().IntVar(&limit, "limit", btDefaultOutboxLimit, fmt.Sprintf("the most events to list (1-%d)", btMaxOutboxLimit))
	var all bool
	retry := &cobra.Command{
		Use:   "retry <id>... | --all",
		Short: "Deliver dead events again (attempts start over); every id must be dead, else nothing changes",
		RunE: func(cmd *cobra.Command, args []string) error {
			if all == (len(args) > 0) {
				return errors.New("give the dead events' ids, or --all")
			}
			var change btOutboxChangeReply
			body := map[string]any{"ids": args, "all": all}
			if err := newAdminClient().do(cmd.Context(), http.MethodPost, "/bittorrent/outbox/dead/retry", body, &change); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "retried %d dead events (%d pending, %d dead)\n", change.Retried, change.Counts.Pending, change.Counts.Dead)
			return nil
		},
	}
	retry.Flags().BoolVar(&all, "all", false, fmt.Sprintf("retry every dead event (up to %d per call)", btMaxOutboxLimit))
	cmd.AddCommand(stats, dead, retry)
	return cmd
}

// trackerFlags are --tracker URL (repeatable) and --tracker-max N: none
// (each tracker's max peers is 50), one (for every tracker), or one per
// --tracker, in the same order.
type trackerFlags struct {
	urls []string
	max  []int
}

func (f *trackerFlags) register(cmd *cobra.Command, also string) {
	cmd.Flags().StringArrayVar(&f.urls, "tracker", nil,
		"an external tracker scoring announces to: udp://host:port/announce, http(s)://host[:port]/announce (repeatable)"+also)
	cmd.Flags().IntSliceVar(&f.max, "tracker-max", nil,
		"the tracker's max peers, the reply size that counts as full (default 50): once for all, or once per --tracker in order")
}

func (f *trackerFlags) list() ([]btTracker, error) {
	if len(f.max) > 1 && len(f.max) != len(f.urls) {
		return nil, fmt.Errorf("%d --tracker-max for %d --tracker: give one for all, or one per tracker", len(f.max), len(f.urls))
	}
	if len(f.max) > 0 && len(f.urls) == 0 {
		return nil, errors.New("--tracker-max without --tracker")
	}
	out := make([]btTracker, len(f.urls))
	for i, u := range f.urls {
		out[i] = btTracker{URL: u}
		switch len(f.max) {
		case 1:
			out[i].MaxPeers = f.max[0]
		case len(f.urls):
			out[i].MaxPeers = f.max[i]
		}
	}
	// The plugin checks the list before it writes anything, so a typo
	// changes nothing; its answer says what is wrong.
	return out, nil
}

func printTrackers(w io.Writer, reply btTrackersReply) {
	if len(reply.Trackers) == 0 {
		fmt.Fprintf(w, "%s has no external trackers\n", reply.InfoHash)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "URL\tMAX PEERS")
	for _, t := range reply.Trackers {
		fmt.Fprintf(tw, "%s\t%d\n", t.URL, t.MaxPeers)
	}
	_ = tw.Flush()
}

// btTrackerCommand is `hoard bt tracker`: a torrent's external trackers.
func btTrackerCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "tracker", Short: "List, set and clear the external trackers scoring announces a torrent to"}
	call := func(cmd *cobra.Command, method, hash string, body any) error {
		path, err := btPath("/torrents/", "info-hash", hash)
		if err != nil {
			return err
		}
		var reply btTrackersReply
		if err := newAdminClient().do(cmd.Context(), method, path+"/trackers", body, &reply); err != nil {
			return err
		}
		printTrackers(cmd.OutOrStdout(), reply)
		return nil
	}
	list := &cobra.Command{
		Use: "list <infohash>", Short: "List a torrent's external trackers", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return call(cmd, http.MethodGet, args[0], nil) },
	}
	var flags trackerFlags
	set := &cobra.Command{
		Use:   "set <infohash> --tracker URL [--tracker URL]... [--tracker-max N]...",
		Short: "Replace a torrent's external trackers",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(flags.urls) == 0 {
				return errors.New("set needs at least one --tracker (clear removes them all)")
			}
			trackers, err := flags.list()
			if err != nil {
				return err
			}
			return call(cmd, http.MethodPut, args[0], btSetTrackersRequest{Trackers: trackers})
		},
	}
	flags.register(set, "")
	clear := &cobra.Command{
		Use: "clear <infohash>", Short: "Remove every external tracker of a torrent", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return call(cmd, http.MethodDelete, args[0], nil) },
	}
	cmd.AddCommand(list, set, clear)
	return cmd
}

// btScoreCommand is `hoard bt score`: a torrent's score, sources and
// history, and the top torrents by score.
func btScoreCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "score", Short: "Show a torrent's score, its sources and history, or the top torrents by score"}
	var rounds int
	show := &cobra.Command{
		Use:   "show <infohash> [--history N]",
		Short: "A torrent's score, each source's line and last round, and its last rounds",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path, err := btPath("/torrents/", "info-hash", args[0])
			if err != nil {
				return err
			}
			var v btScoreView
			if err := newAdminClient().do(cmd.Context(), http.MethodGet, path+"/score", nil, &v); err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			state := v.State
			if !v.Indexed && state == "active" {
				state += " (not in the index yet)"
			}
			printRows(w, [][2]string{{"info_hash", v.InfoHash}, {"state", state},
				{"score", strconv.FormatFloat(v.Score, 'g', 6, 64)}, {"round", strconv.FormatInt(v.Round, 10)}})
			fmt.Fprintln(w)
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SOURCE\tMAX\tLINE\tPEERS\tNEW\tMULT\tLAST")
			for _, s := range v.Sources {
				line, last := "-", "-"
				if s.Line != nil {
					line = strconv.FormatFloat(*s.Line, 'g', 6, 64)
				}
				if s.Applied != nil {
					last = s.Applied.Format(time.RFC3339)
				}
				if s.Error != "" {
					last += fmt.Sprintf(" (failed %d in a row: %s)", s.Fails, s.Error)
				}
				fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t%g\t%s\n", s.Source, s.MaxPeers, line, s.Peers, s.New, s.Mult, last)
			}
			_ = tw.Flush()
			if rounds == 0 || len(v.History) == 0 {
				return nil
			}
			fmt.Fprintln(w)
			tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ROUND\tAT\tSCORE\tSOURCES (peers/new/max ×mult)")
			for _, r := range v.History[:min(rounds, len(v.History))] {
				var parts []string
				for _, s := range r.Sources {
					part := fmt.Sprintf("%s %d/%d/%d ×%g", s.Source, s.Peers, s.New, s.Max, s.Mult)
					if s.Error != "" {
						part = fmt.Sprintf("%s failed ×%g", s.Source, s.Mult)
					}
					parts = append(parts, part)
				}
				score := strconv.FormatFloat(r.Score, 'g', 6, 64)
				if r.Removed {
					score += " removed"
				}
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", r.Round, r.At.Format(time.RFC3339), score, strings.Join(parts, "; "))
			}
			return tw.Flush()
		},
	}
	show.Flags().IntVar(&rounds, "history", 10, "how many of the last rounds to print (0: none)")
	var count int
	top := &cobra.Command{
		Use:   "top [-n N]",
		Short: "The torrents with the highest scores",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if count < 1 || count > btMaxScoresTop {
				return fmt.Errorf("-n %d: want 1 to %d", count, btMaxScoresTop)
			}
			var reply btTopScoresReply
			err := newAdminClient().do(cmd.Context(), http.MethodGet, "/bittorrent/scores/top?n="+strconv.Itoa(count), nil, &reply)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "INFO HASH\tSCORE")
			for _, r := range reply.Torrents {
				fmt.Fprintf(tw, "%s\t%s\n", r.InfoHash, strconv.FormatFloat(r.Score, 'g', 6, 64))
			}
			return tw.Flush()
		},
	}
	top.Flags().IntVarP(&count, "count", "n", btDefaultTopCount, fmt.Sprintf("how many torrents (1-%d)", btMaxScoresTop))
	cmd.AddCommand(show, top)
	return cmd
}
