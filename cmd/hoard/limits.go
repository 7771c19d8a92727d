package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"

	"github.com/spf13/cobra"

	"github.com/hoardproject/hoard/queues"
	"github.com/hoardproject/hoard/server"
)

func limitsCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "limits", Short: "Rate-limit item types and patterns (limit groups)"}
	cmd.AddCommand(&cobra.Command{
		Use:   "set <slug> [file|-]",
		Short: "Replace a project's limit groups from JSON, and re-route queued items",
		Long: "The JSON is a list of groups, e.g.\n" +
			`  [{"name":"users","type":"user","rate_per_minute":60,"burst":5},` + "\n" +
			`   {"name":"huge","glob":"url:https://huge.example/*","rate_per_minute":10},` + "\n" +
			`   {"name":"media","regex":"\\.(jpg|png)$","rate_per_minute":0}]` + "\n" +
			"An item belongs to the first group it matches; rate 0 holds a group back entirely.",
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var input io.Reader = os.Stdin
			if len(args) == 2 && args[1] != "-" {
				f, err := os.Open(args[1])
				if err != nil {
					return err
				}
				defer f.Close()
				input = f
			}
			var groups []queues.LimitGroup
			dec := json.NewDecoder(input)
			dec.DisallowUnknownFields()
			if err := dec.Decode(&groups); err != nil {
				return fmt.Errorf("limit groups: want a JSON list of groups: %w", err)
			}
			var out json.RawMessage
			if err := newAdminClient().do(cmd.Context(), http.MethodPut, "/projects/"+args[0]+"/limit-groups", map[string]any{"groups": groups}, &out); err != nil {
				return err
			}
			return printJSON(out)
		},
	}, &cobra.Command{
		Use:   "reroute <slug>",
		Short: "Route every queued item into the sub-queue its limit group calls for (finishes an interrupted re-route)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var out queues.SiftResult
			if err := newAdminClient().do(cmd.Context(), http.MethodPost, "/projects/"+args[0]+"/queues/reroute", nil, &out); err != nil {
				return err
			}
			fmt.Printf("re-routed %d items (%d looked at)\n", out.Moved, out.Scanned)
			return nil
		},
	}, &cobra.Command{
		Use:   "clear <slug>",
		Short: "Remove every limit group, and route their items back",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var out json.RawMessage
			if err := newAdminClient().do(cmd.Context(), http.MethodPut, "/projects/"+args[0]+"/limit-groups", map[string]any{"groups": []any{}}, &out); err != nil {
				return err
			}
			return printJSON(out)
		},
	})
	return cmd
}

func moveCommand() *cobra.Command {
	var req server.MoveQueueRequest
	cmd := &cobra.Command{
		Use:   "move <slug> --from Q --to Q [--type T | --glob G | --regex R] [--count N] [--dry-run]",
		Short: "Move queued items between queues, by pattern, by count, or both",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var out queues.SiftResult
			if err := newAdminClient().do(cmd.Context(), http.MethodPost, "/projects/"+args[0]+"/queues/move", req, &out); err != nil {
				return err
			}
			if req.DryRun {
				fmt.Printf("would move %d items from %s to %s (%d looked at); nothing moved\n", out.Moved, req.From, req.To, out.Scanned)
				return nil
			}
			fmt.Printf("moved %d items from %s to %s (%d looked at)\n", out.Moved, req.From, req.To, out.Scanned)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.From, "from", "", "todo, backfeed, secondary or redo")
	f.StringVar(&req.To, "to", "", "todo, backfeed, secondary or redo")
	f.StringVar(&req.Type, "type", "", "only items of this type (prefix before the first ':')")
	f.StringVar(&req.Glob, "glob", "", "only items matching this glob")
	f.StringVar(&req.Regex, "regex", "", "only items matching this RE2 expression")
	f.IntVar(&req.Count, "count", 0, "move at most this many (0 = all that match)")
	f.BoolVar(&req.DryRun, "dry-run", false, "only count the items the move would take")
	_ = cmd.MarkFlagRequired("from")
	_ = cmd.MarkFlagRequired("to")
	return cmd
}

// blockPath is the admin path of a block, global or in one project.
func blockPath(project, who string) string {
	if project == "" {
		return "/blocks/" + url.PathEscape(who)
	}
	return "/projects/" + project + "/blocks/" + url.PathEscape(who)
}

func blockCommand() *cobra.Command {
	var project, reason string
	cmd := &cobra.Command{
		Use:   "block <nickname-or-ip>",
		Short: "Block a nickname or IP, in one project or (without --project) in all",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := newAdminClient().do(cmd.Context(), http.MethodPut, blockPath(project, args[0]), map[string]string{"reason": reason}, nil); err != nil {
				return err
			}
			fmt.Println("blocked", args[0])
			return nil
		},
	}
	cmd.Flags().StringVar(&project, "project", "", "block in this project only")
	cmd.Flags().StringVar(&reason, "reason", "", "why (shown to the blocked warrior)")
	return cmd
}

func unblockCommand() *cobra.Command {
	var project string
	cmd := &cobra.Command{
		Use:   "unblock <nickname-or-ip>",
		Short: "Lift a block",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := newAdminClient().do(cmd.Context(), http.MethodDelete, blockPath(project, args[0]), nil, nil); err != nil {
				return err
			}
			fmt.Println("unblocked", args[0])
			return nil
		},
	}
	cmd.Flags().StringVar(&project, "project", "", "the project of the block (default: the global list)")
	return cmd
}

func blocksCommand() *cobra.Command {
	var project string
	cmd := &cobra.Command{
		Use:   "blocks",
		Short: "List blocks, of one project or the global list",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			path := "/blocks"
			if project != "" {
				path = "/projects/" + project + "/blocks"
			}
			var out json.RawMessage
			if err := newAdminClient().do(cmd.Context(), http.MethodGet, path, nil, &out); err != nil {
				return err
			}
			return printJSON(out)
		},
	}
	cmd.Flags().StringVar(&project, "project", "", "list this project's blocks")
	return cmd
}

func logCommand() *cobra.Command {
	var project string
	var global bool
	cmd := &cobra.Command{
		Use:   "log",
		Short: "Show recent operator changes (who changed what, when): every project's and the global ones",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			path := "/log"
			switch {
			case project != "" && global:
				return fmt.Errorf("--project and --global exclude each other")
			case project != "":
				path = "/projects/" + project + "/log"
			case global:
				path = "/log?scope=global"
			}
			var out struct {
				Changes []queues.ChangeEntry `json:"changes"`
			}
			if err := newAdminClient().do(cmd.Context(), http.MethodGet, path, nil, &out); err != nil {
				return err
			}
			for _, c := range out.Changes {
				where := c.Project
				if where == "" {
					where = project
				}
				if where == "" {
					where = "-"
				}
				fmt.Printf("%s  %-20s  %-30s  %s  %s\n", c.At.Format("2006-01-02 15:04:05"), where, c.By, c.What, string(c.Details))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&project, "project", "", "only this project's log")
	cmd.Flags().BoolVar(&global, "global", false, "only changes to global state (blocks, deletions)")
	return cmd
}
