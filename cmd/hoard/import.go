package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/hoardproject/hoard/queues"
	"github.com/hoardproject/hoard/server"
)

// A universal-tracker keeps a project under a key prefix ("<slug>:" by
// default): the waiting items in the SETs todo, todo:secondary, todo:redo
// and todo:d:<downloader>, claims in the ZSET out (item -> claimed at,
// unix seconds) with "<ip> <downloader>" in the HASH claims, completions
// in the SET done, and the leaderboard in the HASHes downloader_bytes,
// downloader_count, downloader_version and domain_bytes. The import reads
// them (SSCAN, ZSCAN, HSCAN: the source is only read) and sends them to
// the running hoard through the admin API in batches; what is already
// queued, out or done in hoard is skipped, so it can be run again.

type importOptions struct {
	from   string
	prefix string
	batch  int
}

func importUniversalCommand() *cobra.Command {
	var o importOptions
	cmd := &cobra.Command{
		Use:   "import-universal <slug> --from redis://HOST:PORT/DB [--prefix SLUG:]",
		Short: "Bring a universal-tracker project's state (todo, out, done, downloader stats) into a hoard project",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runImportUniversal(cmd.Context(), cmd.OutOrStdout(), args[0], o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.from, "from", "", "the universal-tracker's Redis (redis://host:port/db); only read")
	f.StringVar(&o.prefix, "prefix", "", "its key prefix for the project (default \"<slug>:\")")
	f.IntVar(&o.batch, "batch", 5000, "items per request")
	return cmd
}

func runImportUniversal(ctx context.Context, out io.Writer, slug string, o importOptions) error {
	if o.from == "" {
		return fmt.Errorf("--from is required: the universal-tracker's Redis URL")
	}
	if o.batch < 1 || o.batch > queues.MaxImportBatch {
		return fmt.Errorf("--batch must be between 1 and %d", queues.MaxImportBatch)
	}
	if err := queues.ValidateSlug(slug); err != nil {
		return err
	}
	if o.prefix == "" {
		o.prefix = slug + ":"
	}
	opts, err := redis.ParseURL(o.from)
	if err != nil {
		return fmt.Errorf("--from: %w", err)
	}
	src := redis.NewClient(opts)
	defer src.Close()
	if err := src.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("cannot reach the universal-tracker's Redis at %s: %w", o.from, err)
	}
	client := newAdminClient()
	if err := client.do(ctx, http.MethodGet, "/projects/"+slug, nil, nil); err != nil {
		return fmt.Errorf("the hoard project must exist first (hoard project create %s): %w", slug, err)
	}

	// Waiting items, queue by queue, then each downloader's reserved queue.
	var queued, skipped, filtered, unreadable int
	// Items hoard refuses (a control character, NUL, over-long) are left
	// out and counted here: one would refuse its whole batch there.
	acceptable := func(items []string) []string {
		kept := items[:0:0]
		for _, item := range items {
			if queues.ValidateNewItem(item) != nil {
				unreadable++
				continue
			}
			kept = append(kept, item)
		}
		return kept
	}
	enqueue := func(queue, downloader string, items []string) error {
		items = acceptable(items)
		if len(items) == 0 {
			return nil
		}
		raw := make([]json.RawMessage, len(items))
		for i, item := range items {
			raw[i], _ = json.Marshal(item)
		}
		var resp server.AddItemsResponse
		req := map[string]any{"queue": queue, "downloader": downloader, "items": raw}
		if err := client.do(ctx, http.MethodPost, "/projects/"+slug+"/items", req, &resp); err != nil {
			return err
		}
		queued += resp.Queued
		skipped += resp.Skipped + resp.Rejected
		filtered += resp.Filtered
		return nil
	}
	for _, q := range []string{"todo", "todo:secondary", "todo:redo"} {
		err := scanSet(ctx, src, o.prefix+q, o.batch, func(items []string) error { return enqueue(q, "", items) })
		if err != nil {
			return err
		}
	}
	reservedKeys, err := scanKeys(ctx, src, o.prefix+"todo:d:*")
	if err != nil {
		return err
	}
	for _, key := range reservedKeys {
		downloader := strings.TrimPrefix(key, o.prefix+"todo:d:")
		err := scanSet(ctx, src, key, o.batch, func(items []string) error { return enqueue("", downloader, items) })
		if err != nil {
			return err
		}
	}

	var result server.ImportResponse
	send := func(req server.ImportRequest) error {
		var resp server.ImportResponse
		if err := client.do(ctx, http.MethodPost, "/projects/"+slug+"/import", req, &resp); err != nil {
			return err
		}
		result.Done.Imported += resp.Done.Imported
		result.Done.Skipped += resp.Done.Skipped
		result.Claims.Imported += resp.Claims.Imported
		result.Claims.Skipped += resp.Claims.Skipped
		result.Downloaders += resp.Downloaders
		return nil
	}
	// Claims: out gives the time, claims the claimant.
	var claims []queues.ImportedClaim
	flushClaims := func() error {
		if len(claims) == 0 {
			return nil
		}
		err := send(server.ImportRequest{Claims: claims})
		claims = claims[:0]
		return err
	}
	var cursor uint64
	for {
		page, next, err := src.ZScan(ctx, o.prefix+"out", cursor, "", int64(o.batch)).Result()
		if err != nil {
			return fmt.Errorf("read %sout: %w", o.prefix, err)
		}
		items := make([]string, 0, len(page)/2)
		at := make([]float64, 0, len(page)/2)
		for i := 0; i+1 < len(page); i += 2 {
			score, err := strconv.ParseFloat(page[i+1], 64)
			if err != nil {
				unreadable++
				continue
			}
			items = append(items, page[i])
			at = append(at, score)
		}
		if len(items) > 0 {
			records, err := src.HMGet(ctx, o.prefix+"claims", items...).Result()
			if err != nil {
				return fmt.Errorf("read %sclaims: %w", o.prefix, err)
			}
			for i, item := range items {
				record, _ := records[i].(string)
				ip, downloader, ok := strings.Cut(record, " ")
				if !ok || queues.ValidateDownloader(downloader) != nil || queues.ValidateNewItem(item) != nil {
					unreadable++
					continue
				}
				claims = append(claims, queues.ImportedClaim{Item: item, Downloader: downloader, IP: ip,
					ClaimedAt: time.Unix(0, int64(at[i]*float64(time.Second)))})
				if len(claims) == o.batch {
					if err := flushClaims(); err != nil {
						return err
					}
				}
			}
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	if err := flushClaims(); err != nil {
		return err
	}
	// Completions.
	err = scanSet(ctx, src, o.prefix+"done", o.batch, func(items []string) error {
		if items = acceptable(items); len(items) == 0 {
			return nil
		}
		return send(server.ImportRequest{Done: items})
	})
	if err != nil {
		return err
	}
	// The leaderboard.
	bytesBy, err := src.HGetAll(ctx, o.prefix+"downloader_bytes").Result()
	if err != nil {
		return err
	}
	countBy, err := src.HGetAll(ctx, o.prefix+"downloader_count").Result()
	if err != nil {
		return err
	}
	versionBy, err := src.HGetAll(ctx, o.prefix+"downloader_version").Result()
	if err != nil {
		return err
	}
	domains, err := src.HGetAll(ctx, o.prefix+"domain_bytes").Result()
	if err != nil {
		return err
	}
	downloaders := map[string]queues.ImportedDownloader{}
	for name := range merge(bytesBy, countBy) {
		if queues.ValidateDownloader(name) != nil {
			unreadable++
			continue
		}
		b, _ := strconv.ParseInt(bytesBy[name], 10, 64)
		n, _ := strconv.ParseInt(countBy[name], 10, 64)
		downloaders[name] = queues.ImportedDownloader{Bytes: max(b, 0), Items: max(n, 0), Version: versionBy[name]}
	}
	domainBytes := map[string]int64{}
	for group, raw := range domains {
		if n, err := strconv.ParseInt(raw, 10, 64); err == nil && n >= 0 && group != "" && len(group) <= 64 {
			domainBytes[group] = n
		}
	}
	if len(downloaders) > 0 || len(domainBytes) > 0 {
		if err := send(server.ImportRequest{Downloaders: downloaders, DomainBytes: domainBytes}); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "imported into %s: %d waiting items queued (%d already here, %d dropped by filters), %d claims (%d already here), %d done (%d already here), %d downloaders' totals; %d unreadable entries left out\n",
		slug, queued, skipped, filtered, result.Claims.Imported, result.Claims.Skipped, result.Done.Imported, result.Done.Skipped, result.Downloaders, unreadable)
	return nil
}

// scanSet hands a SET's members to fn in batches, with SSCAN (the source
// is never blocked by one huge read).
func scanSet(ctx context.Context, rdb *redis.Client, key string, batch int, fn func([]string) error) error {
	var cursor uint64
	pending := make([]string, 0, batch)
	for {
		members, next, err := rdb.SScan(ctx, key, cursor, "", int64(batch)).Result()
		if err != nil {
			return fmt.Errorf("read %s: %w", key, err)
		}
		for _, m := range members {
			pending = append(pending, m)
			if len(pending) == batch {
				if err := fn(pending); err != nil {
					return err
				}
				pending = pending[:0]
			}
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	if len(pending) > 0 {
		return fn(pending)
	}
	return nil
}

func scanKeys(ctx context.Context, rdb *redis.Client, pattern string) ([]string, error) {
	var keys []string
	iter := rdb.Scan(ctx, 0, pattern, 1000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	return keys, iter.Err()
}

func merge(maps ...map[string]string) map[string]bool {
	out := map[string]bool{}
	for _, m := range maps {
		for k := range m {
			out[k] = true
		}
	}
	return out
}
