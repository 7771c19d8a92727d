package queues

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
)

// Importing another tracker's state (a universal-tracker's Redis, see
// `hoard queue import-universal`): waiting items go through Enqueue; done
// items and claims come here, in batches, each batch one script
// (import_state.lua) that skips what is already out, done or failed, so an
// import can be run again.

// MaxImportBatch caps the items or claims of one import call.
const MaxImportBatch = 10000

// ImportedClaim is a claim carried over: it stays the downloader's, so
// that warrior's done completes it here, and it is reclaimed after the
// project's TTL counted from when it was claimed there.
type ImportedClaim struct {
	Item       string    `json:"item"`
	Downloader string    `json:"downloader"`
	IP         string    `json:"ip"`
	ClaimedAt  time.Time `json:"claimed_at"`
}

// ImportedDownloader is a downloader's totals carried over, for the
// leaderboard.
type ImportedDownloader struct {
	Bytes   int64  `json:"bytes"`
	Items   int64  `json:"items"`
	Version string `json:"version,omitempty"`
}

// ImportResult says what one import call did.
type ImportResult struct {
	Imported int `json:"imported"`
	Skipped  int `json:"skipped"`
}

var importStateScript = loadScript("import_state.lua")

func importKeys(slug string) []string {
	return []string{ConfigKey(slug), DeadlinesKey(slug), ClaimsKey(slug), DoneKey(slug),
		RecentDoneKey(slug), BudgetKey(slug), StatsKey(slug), FailedKey(slug), QueuedKey(slug)}
}

func (e *Engine) runImport(ctx context.Context, op, slug string, args []any) (ImportResult, error) {
	code, rest, err := e.runScriptList(ctx, op, importStateScript, importKeys(slug), args...)
	switch {
	case err != nil:
		return ImportResult{}, err
	case code == codeNoProject:
		return ImportResult{}, errorf(op, CodeProjectNotFound, "no project %q", slug)
	case code == codeCorrupt:
		return ImportResult{}, unavailable(op, errors.New("corrupt project state: "+replyString(rest[0])))
	case code < 0:
		return ImportResult{}, unavailable(op, fmt.Errorf("import script returned code %d", code))
	}
	return ImportResult{Imported: int(code), Skipped: int(replyInt(rest[0]))}, nil
}

// ImportDone records items completed elsewhere as done here (in the done
// set, or counted and kept among the recent completions in count and
// archive mode), counting them in items_done.
func (e *Engine) ImportDone(ctx context.Context, slug string, items []string) (ImportResult, error) {
	const op = "queues.ImportDone"
	if err := ValidateSlug(slug); err != nil {
		return ImportResult{}, err
	}
	if len(items) > MaxImportBatch {
		return ImportResult{}, errorf(op, CodeInvalid, "%d items in one import; the limit is %d", len(items), MaxImportBatch)
	}
	args := make([]any, 0, 2+len(items))
	args = append(args, e.nowMillis(), "done")
	for i, item := range items {
		if err := ValidateNewItem(item); err != nil {
			return ImportResult{}, atIndex(err, "done item", i)
		}
		args = append(args, item)
	}
	if len(items) == 0 {
		return ImportResult{}, nil
	}
	return e.runImport(ctx, op, slug, args)
}

// ImportClaims records claims held elsewhere as claims here.
func (e *Engine) ImportClaims(ctx context.Context, slug string, claims []ImportedClaim) (ImportResult, error) {
	const op = "queues.ImportClaims"
	if err := ValidateSlug(slug); err != nil {
		return ImportResult{}, err
	}
	if len(claims) > MaxImportBatch {
		return ImportResult{}, errorf(op, CodeInvalid, "%d claims in one import; the limit is %d", len(claims), MaxImportBatch)
	}
	if err := e.validateClaims(claims); err != nil {
		return ImportResult{}, err
	}
	args := make([]any, 0, 2+4*len(claims))
	args = append(args, e.nowMillis(), "claims")
	for _, c := range claims {
		ip := c.IP
		if ip == "" || len(ip) > 64 || strings.ContainsAny(ip, " ,\r\n") {
			ip = "-"
		}
		args = append(args, c.Item, c.Downloader, ip, c.ClaimedAt.UnixMilli())
	}
	if len(claims) == 0 {
		return ImportResult{}, nil
	}
	return e.runImport(ctx, op, slug, args)
}

// ImportDownloaders adds downloaders' totals (bytes, items, the last
// script version) and the per-group byte counts to the project's
// leaderboard counters, in one transaction.
func (e *Engine) ImportDownloaders(ctx context.Context, slug string, downloaders map[string]ImportedDownloader, domainBytes map[string]int64) error {
	const op = "queues.ImportDownloaders"
	if _, err := e.Project(ctx, slug); err != nil {
		return err
	}
	if err := validateDownloaders(downloaders, domainBytes); err != nil {
		return err
	}
	names := make([]string, 0, len(downloaders))
	for name := range downloaders {
		names = append(names, name)
	}
	sort.Strings(names)
	pipe := e.rdb.TxPipeline()
	for _, name := range names {
		d := downloaders[name]
		pipe.HIncrBy(ctx, DownloaderBytesKey(slug), name, d.Bytes)
		pipe.HIncrBy(ctx, DownloaderItemsKey(slug), name, d.Items)
		if d.Version != "" && len(d.Version) <= 64 {
			pipe.HSet(ctx, DownloaderVersionKey(slug), name, d.Version)
		}
	}
	for group, n := range domainBytes {
		pipe.HIncrBy(ctx, DomainBytesKey(slug), group, n)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return unavailable(op, err)
	}
	return nil
}

// ValidateImport checks a whole import before any part of it is written,
// so a bad claim never leaves the done items before it imported.
func (e *Engine) ValidateImport(done []string, claims []ImportedClaim, downloaders map[string]ImportedDownloader, domainBytes map[string]int64) error {
	const op = "queues.ValidateImport"
	if len(done) > MaxImportBatch || len(claims) > MaxImportBatch {
		return errorf(op, CodeInvalid, "%d done items and %d claims in one import; the limit is %d each", len(done), len(claims), MaxImportBatch)
	}
	for i, item := range done {
		if err := ValidateNewItem(item); err != nil {
			return atIndex(err, "done item", i)
		}
	}
	if err := e.validateClaims(claims); err != nil {
		return err
	}
	return validateDownloaders(downloaders, domainBytes)
}

func (e *Engine) validateClaims(claims []ImportedClaim) error {
	const op = "queues.ImportClaims"
	for i, c := range claims {
		if err := ValidateNewItem(c.Item); err != nil {
			return atIndex(err, "claim", i)
		}
		if err := ValidateDownloader(c.Downloader); err != nil {
			return atIndex(err, "claim", i)
		}
		if c.ClaimedAt.IsZero() || c.ClaimedAt.After(e.clock.Now().Add(time.Minute)) {
			return errorf(op, CodeInvalid, "claim of %q: claimed_at %v is missing or in the future", truncate(c.Item, 60), c.ClaimedAt)
		}
	}
	return nil
}

func validateDownloaders(downloaders map[string]ImportedDownloader, domainBytes map[string]int64) error {
	const op = "queues.ImportDownloaders"
	for name, d := range downloaders {
		if err := ValidateDownloader(name); err != nil {
			return err
		}
		if d.Bytes < 0 || d.Items < 0 || d.Bytes > MaxGroupBytes*MaxByteGroups {
			return errorf(op, CodeInvalid, "downloader %q: totals out of range", name)
		}
	}
	for group, n := range domainBytes {
		if group == "" || len(group) > 64 || n < 0 {
			return errorf(op, CodeInvalid, "bytes group %q: name must be 1-64 bytes and bytes not negative", truncate(group, 64))
		}
	}
	return nil
}
