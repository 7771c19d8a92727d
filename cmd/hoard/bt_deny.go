package main

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

// btDenyEntry is one entry of a deny list as the plugin answers it.
type btDenyEntry struct {
	InfoHash string `json:"info_hash,omitempty"`
	Prefix   string `json:"prefix,omitempty"`
	Reason   string `json:"reason"`
}

type btDenyListsReply struct {
	Torrents []btDenyEntry `json:"torrents"`
	Clients  []btDenyEntry `json:"clients"`
}

// btDenyCommand is `hoard bt deny`: the info-hashes and clients the
// tracker refuses, in open and private mode alike.
func btDenyCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "deny",
		Short: "Deny info-hashes and clients (peer_id prefixes) in either mode",
		Long: `Deny info-hashes and clients (peer_id prefixes) in either mode: their
announces are refused with "this torrent is not allowed on this tracker" or
"your client is not allowed on this tracker", and the reason if given.
Changes reach every tracker frontend at once. A prefix that starts with '-'
goes after --:

  hoard bt deny client add --reason "leaks peers" -- -XL0012-
  hoard bt deny torrent add 0123…cdef --reason "DMCA takedown"
  hoard bt deny list`,
	}
	var reason string
	entry := func(kind, what string, path func(string) (string, error), show func(btDenyEntry) string) *cobra.Command {
		c := &cobra.Command{Use: kind, Short: "Deny " + what + "s, or allow them again"}
		add := &cobra.Command{
			Use:   "add [--reason R] [--] <" + what + ">",
			Short: "Deny a " + what,
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				p, err := path(args[0])
				if err != nil {
					return err
				}
				var reply btDenyEntry
				if err := newAdminClient().do(cmd.Context(), http.MethodPut, p, map[string]string{"reason": reason}, &reply); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "denied %s %s\n", what, show(reply))
				return nil
			},
		}
		add.Flags().StringVar(&reason, "reason", "", "the reason clients read (1-200 bytes)")
		remove := &cobra.Command{
			Use:   "remove [--] <" + what + ">",
			Short: "Allow a denied " + what + " again",
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				p, err := path(args[0])
				if err != nil {
					return err
				}
				var reply btDenyEntry
				if err := newAdminClient().do(cmd.Context(), http.MethodDelete, p, nil, &reply); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "allowed %s %s again\n", what, show(reply))
				return nil
			},
		}
		for _, sub := range []*cobra.Command{add, remove} {
			sub.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
				return fmt.Errorf("%w (a prefix that starts with '-' goes after --: hoard bt deny client %s [--reason R] -- -XL0012-)", err, cmd.Name())
			})
		}
		c.AddCommand(add, remove)
		return c
	}
	torrent := entry("torrent", "info-hash", func(arg string) (string, error) {
		return btPath("/deny/torrents/", "info-hash", arg)
	}, func(e btDenyEntry) string { return e.InfoHash })
	client := entry("client", "prefix", func(arg string) (string, error) {
		return "/bittorrent/deny/clients/" + url.PathEscape(arg), nil
	}, func(e btDenyEntry) string { return strconv.Quote(e.Prefix) })
	list := &cobra.Command{
		Use:   "list",
		Short: "List the deny lists",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var reply btDenyListsReply
			if err := newAdminClient().do(cmd.Context(), http.MethodGet, "/bittorrent/deny", nil, &reply); err != nil {
				return err
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "KIND\tDENIED\tREASON")
			for _, e := range reply.Torrents {
				fmt.Fprintf(w, "torrent\t%s\t%s\n", e.InfoHash, e.Reason)
			}
			for _, e := range reply.Clients {
				fmt.Fprintf(w, "client\t%s\t%s\n", strconv.Quote(e.Prefix), e.Reason)
			}
			return w.Flush()
		},
	}
	cmd.AddCommand(torrent, client, list)
	return cmd
}
