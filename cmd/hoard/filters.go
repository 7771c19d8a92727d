package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/hoardproject/hoard/queues"
	"github.com/hoardproject/hoard/server"
)

// filtersCommand lists, adds and removes a project's filters: items that
// match one are dropped on every way in (docs/filters.md).
func filtersCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "filters", Short: "List, add and remove the filters that drop matching items on the way in"}
	cmd.AddCommand(filtersListCommand(), filtersAddCommand(), filtersRemoveCommand(), filtersSiftCommand())
	return cmd
}

func filtersListCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "list <slug>",
		Short: "List a project's filters",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var out server.FiltersReply
			if err := newAdminClient().do(cmd.Context(), http.MethodGet, filtersPath(args[0]), nil, &out); err != nil {
				return err
			}
			return printFilters(cmd.OutOrStdout(), out.Filters)
		},
	}
}

func filtersAddCommand() *cobra.Command {
	var f queues.Filter
	var sift bool
	cmd := &cobra.Command{
		Use:   "add <slug> <name> (--type T | --glob G | --regex RE2)",
		Short: "Add a filter: items of that type, or matching the glob or RE2 expression, are dropped from now on",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			f.Name = args[1]
			var out server.FiltersReply
			if err := newAdminClient().do(cmd.Context(), http.MethodPost, filtersPath(args[0]), f, &out); err != nil {
				return err
			}
			if err := printFilters(cmd.OutOrStdout(), out.Filters); err != nil {
				return err
			}
			if sift {
				return siftFilters(cmd, args[0])
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&sift, "sift", false, "also drop the matching items already queued (as `hoard filters sift` does)")
	cmd.Flags().StringVar(&f.Type, "type", "", "item type: the prefix before the first ':'")
	cmd.Flags().StringVar(&f.Glob, "glob", "", "glob over the whole item: * any run, ? one character, [...] a class")
	cmd.Flags().StringVar(&f.Regex, "regex", "", "RE2 expression, matched anywhere in the item unless anchored")
	return cmd
}

func filtersRemoveCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "remove <slug> <name>",
		Short: "Remove a filter: matching items are accepted again from now on",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var out server.FiltersReply
			if err := newAdminClient().do(cmd.Context(), http.MethodDelete, filtersPath(args[0])+"/"+url.PathEscape(args[1]), nil, &out); err != nil {
				return err
			}
			return printFilters(cmd.OutOrStdout(), out.Filters)
		},
	}
}

func filtersSiftCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "sift <slug>",
		Short: "Drop the queued items the project's filters match (shared queues and limit groups' sub-queues), beside live traffic",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return siftFilters(cmd, args[0])
		},
	}
}

func siftFilters(cmd *cobra.Command, slug string) error {
	var out server.FilterSiftReply
	if err := newAdminClient().do(cmd.Context(), http.MethodPost, filtersPath(slug)+"/sift", nil, &out); err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "dropped %d queued items (%d looked at)\n", out.Dropped, out.Scanned)
	return nil
}

func filtersPath(slug string) string { return "/projects/" + url.PathEscape(slug) + "/filters" }

// printFilters writes one line per filter; operator-typed patterns go
// through the control escaper, as items do.
func printFilters(w io.Writer, filters []queues.Filter) error {
	escaper := &controlEscaper{w: w}
	tw := tabwriter.NewWriter(escaper, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tMATCHES")
	for _, f := range filters {
		switch {
		case f.Type != "":
			fmt.Fprintf(tw, "%s\ttype %s\n", f.Name, f.Type)
		case f.Glob != "":
			fmt.Fprintf(tw, "%s\tglob %s\n", f.Name, f.Glob)
		default:
			fmt.Fprintf(tw, "%s\tregex %s\n", f.Name, f.Regex)
		}
	}
	return errors.Join(tw.Flush(), escaper.Close())
}
