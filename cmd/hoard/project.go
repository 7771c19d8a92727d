package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hoardproject/hoard/queues"
	"github.com/hoardproject/hoard/server"
)

func projectCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "project", Short: "Create, change and show projects"}
	cmd.AddCommand(projectWriteCommand("create"), projectWriteCommand("set"), projectDeleteCommand(),
		projectPauseCommand("pause", true), projectPauseCommand("resume", false), projectShowCommand(), &cobra.Command{
			Use:   "list",
			Short: "List projects",
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				var out struct {
					Projects []string `json:"projects"`
				}
				if err := newAdminClient().do(cmd.Context(), http.MethodGet, "/projects", nil, &out); err != nil {
					return err
				}
				fmt.Println(strings.Join(out.Projects, "\n"))
				return nil
			},
		})
	return cmd
}

// projectWriteCommand builds "create" and "set": the same flags, and only
// the flags given are sent.
func projectWriteCommand(verb string) *cobra.Command {
	var (
		title, minVersion             string
		paused, reclaim               bool
		ratePerMinute                 float64
		rateBurst, budget, claimLimit int
		maxMulti, logLength           int
		bloomCapacity, offloadAbove   int
		bloomWords                    int
		bloomKind                     string
		offloadSegment, recentDone    int
		bloomFPRate                   float64
		doneMode                      string
		reclaimTTL                    time.Duration
		uploadTargets, extras         []string
		downloaderRate, ipRate        float64
		downloaderBurst, ipBurst      int
		ignoreGlobalBlocks            bool
		backfeedSecret                string
		maxClaims                     int
		failReportTo                  string
		showSecret                    bool
	)
	cmd := &cobra.Command{
		Use:   verb + " <slug>",
		Short: map[string]string{"create": "Create a project", "set": "Change a project's settings"}[verb],
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var p queues.SettingsPatch
			f := cmd.Flags()
			changed := func(name string) bool { return f.Changed(name) }
			if changed("title") {
				p.Title = &title
			}
			if changed("paused") {
				p.Paused = &paused
			}
			if changed("min-version") {
				p.MinVersion = &minVersion
			}
			if changed("rate-per-minute") {
				p.RatePerMinute = &ratePerMinute
			}
			if changed("rate-burst") {
				p.RateBurst = &rateBurst
			}
			if changed("downloader-rate-per-minute") {
				p.DownloaderRatePerMinute = &downloaderRate
			}
			if changed("downloader-rate-burst") {
				p.DownloaderRateBurst = &downloaderBurst
			}
			if changed("ip-rate-per-minute") {
				p.IPRatePerMinute = &ipRate
			}
			if changed("ip-rate-burst") {
				p.IPRateBurst = &ipBurst
			}
			if changed("backfeed-secret") {
				p.BackfeedSecret = &backfeedSecret
			}
			if changed("ignore-global-blocks") {
				p.IgnoreGlobalBlocks = &ignoreGlobalBlocks
			}
			if changed("downloader-budget") {
				p.DownloaderBudget = &budget
			}
			if changed("claims-limit") {
				p.ClaimsLimit = &claimLimit
			}
			if changed("reclaim") {
				p.ReclaimEnabled = &reclaim
			}
			if changed("reclaim-ttl") {
				d := queues.Duration(reclaimTTL)
				p.ReclaimTTL = &d
			}
			if changed("max-multi") {
				p.MaxMulti = &maxMulti
			}
			if changed("log-length") {
				p.LogLength = &logLength
			}
			if changed("upload-target") {
				p.UploadTargets = &uploadTargets
			}
			if changed("bloom-capacity") {
				p.BloomCapacity = &bloomCapacity
			}
			if changed("bloom-fp-rate") {
				p.BloomFPRate = &bloomFPRate
			}
			if changed("bloom-words") {
				p.BloomWords = &bloomWords
			}
			if changed("bloom-kind") {
				p.BloomKind = &bloomKind
			}
			if changed("offload-above") {
				p.OffloadAbove = &offloadAbove
			}
			if changed("offload-segment") {
				p.OffloadSegment = &offloadSegment
			}
			if changed("done-mode") {
				p.DoneMode = &doneMode
			}
			if changed("recent-done") {
				p.RecentDone = &recentDone
			}
			if changed("max-claims") {
				p.MaxClaims = &maxClaims
			}
			if changed("fail-report-to") {
				p.FailReportTo = &failReportTo
			}
			if changed("extra") {
				m := map[string]json.RawMessage{}
				for _, kv := range extras {
					k, v, ok := strings.Cut(kv, "=")
					if !ok || !json.Valid([]byte(v)) {
						return fmt.Errorf("--extra %q: want key=<JSON value>, e.g. depth=2 or name='\"x\"'", kv)
					}
					m[k] = json.RawMessage(v)
				}
				p.Extra = &m
			}
			method := map[string]string{"create": http.MethodPost, "set": http.MethodPatch}[verb]
			var out json.RawMessage
			if err := newAdminClient().do(cmd.Context(), method, "/projects/"+args[0], p, &out); err != nil {
				return err
			}
			return printProject(out, showSecret)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&showSecret, "show-secret", false, "print the backfeed secret itself, not its fingerprint")
	f.StringVar(&title, "title", "", "human-readable title")
	f.BoolVar(&paused, "paused", false, "stop handing out items (withheld from projects.json)")
	f.StringVar(&minVersion, "min-version", "", "lowest pipeline VERSION served (older get 455); \"\" = any")
	f.Float64Var(&ratePerMinute, "rate-per-minute", 0, "item requests per minute for the project, smoothed; 0 = unlimited")
	f.IntVar(&rateBurst, "rate-burst", 1, "requests allowed back to back under the rate limit")
	f.Float64Var(&downloaderRate, "downloader-rate-per-minute", 0, "item requests per minute per downloader; 0 = unlimited")
	f.IntVar(&downloaderBurst, "downloader-rate-burst", 1, "requests one downloader may make back to back")
	f.Float64Var(&ipRate, "ip-rate-per-minute", 0, "item requests per minute per client IP; 0 = unlimited")
	f.IntVar(&ipBurst, "ip-rate-burst", 1, "requests one IP may make back to back")
	f.BoolVar(&ignoreGlobalBlocks, "ignore-global-blocks", false, "serve nicknames and IPs blocked server-wide")
	f.StringVar(&backfeedSecret, "backfeed-secret", "", "secret of POST /backfeed/legacy/<slug>-<secret> (8-128 of A-Za-z0-9_); \"\" turns backfeed off")
	f.IntVar(&budget, "downloader-budget", 0, "most items one downloader may have out; 0 = unlimited")
	f.IntVar(&claimLimit, "claims-limit", 0, "most items out in the whole project; 0 = unlimited")
	f.BoolVar(&reclaim, "reclaim", false, "hand out items again after TTL x times claimed")
	f.DurationVar(&reclaimTTL, "reclaim-ttl", queues.DefaultReclaimTTL, "reclaim TTL")
	f.IntVar(&maxMulti, "max-multi", queues.DefaultMaxMulti, "largest N served for multi=N")
	f.IntVar(&logLength, "log-length", queues.DefaultLogLength, "recent completions kept")
	f.StringSliceVar(&uploadTargets, "upload-target", nil, "rsync:// or http(s):// target ending in /, with :downloader; repeatable")
	f.StringArrayVar(&extras, "extra", nil, "key=<JSON> sent with every item; repeatable")
	f.IntVar(&bloomCapacity, "bloom-capacity", queues.DefaultBloomCapacity, "items per backfeed Bloom filter generation")
	f.Float64Var(&bloomFPRate, "bloom-fp-rate", queues.DefaultBloomFPRate, "false-positive rate of new Bloom filter generations")
	f.StringVar(&bloomKind, "bloom-kind", queues.BloomKindBlocked, "kind of new backfeed filter generations: blocked (a Bloom filter) or sets (32-bit fingerprints in small Redis sets: less Redis CPU per backfed item and less memory, rates down to ~7.5e-9)")
	f.IntVar(&bloomWords, "bloom-words", 0, "32-bit words per item in new Bloom filter generations, 2-4 (fewer: less Redis CPU per backfed item, more memory); 0 = automatic")
	f.IntVar(&offloadAbove, "offload-above", 0, "items a queue keeps in Redis before its tail moves to segment files on disk; 0 = never")
	f.IntVar(&offloadSegment, "offload-segment", queues.DefaultOffloadSegment, "items per offloaded segment file")
	f.StringVar(&doneMode, "done-mode", queues.DoneKeep, "done items: keep (a set in Redis), count (and discard), or archive (to files on disk)")
	f.IntVar(&recentDone, "recent-done", queues.DefaultRecentDone, "completions remembered for repeated dones when done-mode is count or archive")
	f.IntVar(&maxClaims, "max-claims", queues.DefaultMaxClaims, "times an item may be claimed without a done before it goes to the failed items; 0 = reclaim forever")
	f.StringVar(&failReportTo, "fail-report-to", queues.FailToFailed, "where an item its claimant reports failed goes: failed, or redo (served again until max-claims)")
	f.SortFlags = false
	return cmd
}

// projectDeleteCommand removes a project with everything it holds. It
// asks for --yes, and for --force when warriors hold items.
func projectDeleteCommand() *cobra.Command {
	var yes, force bool
	cmd := &cobra.Command{
		Use:   "delete <slug> --yes [--force]",
		Short: "Delete a project: its queues, claims, done items, stats, logs, segment and archive files",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			slug := args[0]
			if !yes {
				return fmt.Errorf("deleting %s removes its queues, claims, done items, stats, logs and files, and cannot be undone; run again with --yes", slug)
			}
			query := url.Values{"confirm": {slug}}
			if force {
				query.Set("force", "true")
			}
			var out server.DeleteProjectReply
			if err := newAdminClient().do(cmd.Context(), http.MethodDelete, "/projects/"+url.PathEscape(slug)+"?"+query.Encode(), nil, &out); err != nil {
				if strings.Contains(err.Error(), "delete it anyway with force") {
					return fmt.Errorf("%w\n(add --force to delete it with those items out)", err)
				}
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "deleted project %s: %d keys, %d files, %d claims were out\n",
				out.Deleted, out.Keys, out.Files, out.ClaimsOut)
			return nil
		},
	}
	cmd.Flags().BoolVar(&yes, "yes", false, "confirm the deletion")
	cmd.Flags().BoolVar(&force, "force", false, "delete even with items out (their warriors' dones will be refused)")
	return cmd
}

// projectPauseCommand builds "pause" and "resume", short for
// "set --paused" and "set --paused=false".
func projectPauseCommand(verb string, paused bool) *cobra.Command {
	return &cobra.Command{
		Use:   verb + " <slug>",
		Short: map[bool]string{true: "Stop handing out items (set --paused)", false: "Hand out items again (set --paused=false)"}[paused],
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var out queues.Project
			if err := newAdminClient().do(cmd.Context(), http.MethodPatch, "/projects/"+args[0], queues.SettingsPatch{Paused: &paused}, &out); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: paused=%t\n", out.Slug, out.Paused)
			return nil
		},
	}
}

func projectShowCommand() *cobra.Command {
	var showSecret bool
	cmd := &cobra.Command{
		Use:   "show <slug>",
		Short: "Show a project's settings and counts (the backfeed secret as its fingerprint unless --show-secret)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var out json.RawMessage
			if err := newAdminClient().do(cmd.Context(), http.MethodGet, "/projects/"+args[0], nil, &out); err != nil {
				return err
			}
			return printProject(out, showSecret)
		},
	}
	cmd.Flags().BoolVar(&showSecret, "show-secret", false, "print the backfeed secret itself, not its fingerprint")
	return cmd
}

func printJSON(raw json.RawMessage) error {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		_, err = os.Stdout.Write(raw)
		return err
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
