package queues

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/redis/go-redis/v9"
)

// Failed items are the project's dead letter: an item claimed max_claims
// times without a done (claim.lua moves it when the reclaim would hand it
// out again; release.lua when it is released), or reported failed by its
// claimant (fail.lua). An item there is in no other place until an
// operator requeues it (its claim count starts again) or deletes it.

var (
	failScript       = loadScript("fail.lua")
	failedMoveScript = loadScript("failed_move.lua")
)

// Why an item failed (FailedItem.Reason).
const (
	FailedMaxClaims = "max_claims"
	FailedReported  = "reported"
)

// MaxFailReason bounds a failure report's reason, in bytes.
const MaxFailReason = 500

// FailedItem is one failed item with its claim history.
type FailedItem struct {
	Item string `json:"item"`
	// Claims is how many times it was claimed.
	Claims int `json:"claims"`
	// At is when it failed.
	At time.Time `json:"at"`
	// Reason is FailedMaxClaims or FailedReported; Message is the
	// reporter's reason for a report.
	Reason  string `json:"reason"`
	Message string `json:"message,omitempty"`
	// History lists its ended claims, oldest first (at most 32).
	History []ClaimEnd `json:"history"`
}

// ClaimEnd is one claim of an item that ended without a done.
type ClaimEnd struct {
	By string    `json:"by"`
	At time.Time `json:"at"`
	// Ended is "expired" (reclaimed, or failed at its reclaim),
	// "released" or "reported".
	Ended string `json:"ended"`
	// Reason is the report's reason, for Ended "reported".
	Reason string `json:"reason,omitempty"`
}

// failedRecord is the JSON the scripts store (lua/prelude.lua fail_item).
type failedRecord struct {
	Claims  int    `json:"claims"`
	At      int64  `json:"at"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
	History []struct {
		By     string `json:"by"`
		At     int64  `json:"at"`
		Ended  string `json:"ended"`
		Reason string `json:"reason"`
	} `json:"history"`
}

func parseFailed(item, raw string) FailedItem {
	var r failedRecord
	f := FailedItem{Item: item, History: []ClaimEnd{}}
	if err := json.Unmarshal([]byte(raw), &r); err != nil {
		// Unreadable: still listed (and so requeueable or deletable).
		f.Reason = "unreadable record"
		return f
	}
	f.Claims, f.At, f.Reason, f.Message = r.Claims, time.UnixMilli(r.At).UTC(), r.Reason, r.Message
	for _, h := range r.History {
		f.History = append(f.History, ClaimEnd{By: h.By, At: time.UnixMilli(h.At).UTC(), Ended: h.Ended, Reason: h.Reason})
	}
	return f
}

// MaxFailedPage caps the items of one FailedItems page.
const MaxFailedPage = 1000

// FailedItems lists a page of the failed items from cursor (0 to start);
// the next cursor is 0 at the end. Pages come from HSCAN, so an item may
// be listed twice while the set changes, never missed.
func (e *Engine) FailedItems(ctx context.Context, slug string, cursor uint64, limit int) ([]FailedItem, uint64, error) {
	const op = "queues.FailedItems"
	if limit < 1 || limit > MaxFailedPage {
		return nil, 0, errorf(op, CodeInvalid, "limit must be between 1 and %d", MaxFailedPage)
	}
	if _, err := e.Project(ctx, slug); err != nil {
		return nil, 0, err
	}
	fields, next, err := e.rdb.HScan(ctx, FailedKey(slug), cursor, "", int64(limit)).Result()
	if err != nil {
		return nil, 0, unavailable(op, err)
	}
	out := make([]FailedItem, 0, len(fields)/2)
	for i := 0; i+1 < len(fields); i += 2 {
		out = append(out, parseFailed(fields[i], fields[i+1]))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Item < out[j].Item })
	return out, next, nil
}

// EachFailed calls fn for every failed item (an export), until fn
// returns false.
func (e *Engine) EachFailed(ctx context.Context, slug string, fn func(FailedItem) bool) error {
	var cursor uint64
	for {
		page, next, err := e.FailedItems(ctx, slug, cursor, MaxFailedPage)
		if err != nil {
			return err
		}
		for _, f := range page {
			if !fn(f) {
				return nil
			}
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}

// FailedCount is how many items are failed.
func (e *Engine) FailedCount(ctx context.Context, slug string) (int64, error) {
	n, err := e.rdb.HLen(ctx, FailedKey(slug)).Result()
	if err != nil {
		return 0, unavailable("queues.FailedCount", err)
	}
	return n, nil
}

// FailedMoveResult says what a requeue or delete of failed items did.
type FailedMoveResult struct {
	Moved int `json:"moved"`
	// NotFailed items were named but not failed; they were left alone.
	NotFailed int `json:"not_failed"`
}

// RequeueFailed puts failed items back in a shared queue (routed to their
// limit groups' sub-queues as an enqueue is), their claim count reset.
// An empty items list requeues every failed item.
func (e *Engine) RequeueFailed(ctx context.Context, slug string, q Queue, items []string) (FailedMoveResult, error) {
	const op = "queues.RequeueFailed"
	q, err := ParseQueue(string(q))
	if err != nil {
		return FailedMoveResult{}, err
	}
	if q == QueueScored {
		return FailedMoveResult{}, errorf(op, CodeInvalid, "failed items go back to todo, backfeed, secondary or redo, not the scored queue")
	}
	return e.moveFailed(ctx, op, slug, "requeue", q, items)
}

// DeleteFailed removes failed items (and their extras) for good. An empty
// items list deletes every failed item.
func (e *Engine) DeleteFailed(ctx context.Context, slug string, items []string) (FailedMoveResult, error) {
	return e.moveFailed(ctx, "queues.DeleteFailed", slug, "delete", QueueTodo, items)
}

func (e *Engine) moveFailed(ctx context.Context, op, slug, mode string, q Queue, items []string) (FailedMoveResult, error) {
	if err := ValidateSlug(slug); err != nil {
		return FailedMoveResult{}, err
	}
	for i, item := range items {
		if err := ValidateItem(item); err != nil {
			return FailedMoveResult{}, atIndex(err, "item", i)
		}
	}
	if _, err := e.Project(ctx, slug); err != nil {
		return FailedMoveResult{}, err
	}
	var total FailedMoveResult
	run := func(batch []string) error {
		code, rest, err := e.runWithGroups(ctx, op, slug, failedMoveScript, func(state *groupState) ([]string, []any) {
			keys := []string{ConfigKey(slug), FailedKey(slug), HistoryKey(slug), ExtrasKey(slug), StatsKey(slug), QueueKey(slug, q)}
			for _, g := range state.groups {
				keys = append(keys, GroupQueueKey(slug, q, g.Name))
			}
			keys = append(keys, QueuedKey(slug))
			args := make([]any, 0, 2+2*len(batch))
			args = append(args, mode, state.version)
			for _, item := range batch {
				args = append(args, item, groupFor(state.groups, item)+1)
			}
			return keys, args
		})
		switch {
		case err != nil:
			return err
		case code == codeNoProject:
			return errorf(op, CodeProjectNotFound, "no project %q", slug)
		case code < 0:
			return unavailable(op, fmt.Errorf("failed_move script returned code %d", code))
		}
		total.Moved += int(code)
		total.NotFailed += int(replyInt(rest[0]))
		return nil
	}
	if len(items) > 0 {
		for start := 0; start < len(items); start += 1000 {
			if err := run(items[start:min(start+1000, len(items))]); err != nil {
				return total, err
			}
		}
		return total, nil
	}
	// Every failed item: page through the hash; moved items leave it, so
	// each pass starts over until it is empty. The cap stops a loop that
	// makes no progress (items failing again as fast as they are moved).
	for pass := 0; pass < 1_000_000; pass++ {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		fields, _, err := e.rdb.HScan(ctx, FailedKey(slug), 0, "", 1000).Result()
		if err != nil {
			return total, unavailable(op, err)
		}
		if len(fields) == 0 {
			return total, nil
		}
		batch := make([]string, 0, len(fields)/2)
		for i := 0; i < len(fields); i += 2 {
			batch = append(batch, fields[i])
		}
		before := total.Moved
		if err := run(batch); err != nil {
			return total, err
		}
		if total.Moved == before {
			return total, nil
		}
	}
	return total, nil
}

// FailRequest is a claimant's report that it could not do its items.
type FailRequest struct {
	Project    string
	Downloader string
	Items      []string
	Reason     string
}

// FailResult says where the reported items went.
type FailResult struct {
	// Items is how many items the report took out of out.
	Items int `json:"items"`
	// To is the project's fail_report_to: "failed" or "redo".
	To string `json:"to"`
	// Failed of the items went to the failed items (all of them with
	// "failed"; with "redo", those claimed max_claims times).
	Failed int `json:"failed"`
}

// ReportFailure takes items out of out at once, to the failed items or
// back to todo:redo as the project says, recording the reason. Only the
// item's current claimant may report it; otherwise nothing changes.
func (e *Engine) ReportFailure(ctx context.Context, req FailRequest) (FailResult, error) {
	const op = "queues.ReportFailure"
	if err := ValidateSlug(req.Project); err != nil {
		return FailResult{}, err
	}
	if err := ValidateDownloader(req.Downloader); err != nil {
		return FailResult{}, err
	}
	if len(req.Items) == 0 {
		return FailResult{}, errorf(op, CodeInvalid, "no items named")
	}
	if len(req.Items) > MaxMulti {
		return FailResult{}, errorf(op, CodeInvalid, "%d items in one report; the limit is %d", len(req.Items), MaxMulti)
	}
	for i, item := range req.Items {
		if err := ValidateItem(item); err != nil {
			return FailResult{}, atIndex(err, "item", i)
		}
	}
	if len(req.Reason) > MaxFailReason {
		return FailResult{}, errorf(op, CodeInvalid, "reason of %d bytes is longer than %d", len(req.Reason), MaxFailReason)
	}
	if err := CheckText("reason", req.Reason); err != nil {
		return FailResult{}, err
	}
	slug := req.Project
	code, rest, err := e.runWithGroups(ctx, op, slug, failScript, func(state *groupState) ([]string, []any) {
		keys := []string{ConfigKey(slug), DeadlinesKey(slug), ClaimsKey(slug), BudgetKey(slug),
			StatsKey(slug), FailedKey(slug), HistoryKey(slug), ReleasedKey(slug), QueueKey(slug, QueueRedo)}
		for _, g := range state.groups {
			keys = append(keys, GroupQueueKey(slug, QueueRedo, g.Name))
		}
		keys = append(keys, BatchesKey(slug), BatchDeadlinesKey(slug), QueuedKey(slug))
		args := make([]any, 0, 4+2*len(req.Items))
		args = append(args, e.nowMillis(), req.Downloader, state.version, req.Reason)
		for _, item := range req.Items {
			args = append(args, item, groupFor(state.groups, item)+1)
		}
		return keys, args
	})
	if err != nil {
		return FailResult{}, err
	}
	items := func() []string {
		out := make([]string, 0, len(rest))
		for _, v := range rest {
			out = append(out, replyString(v))
		}
		return out
	}
	switch code {
	case codeNoProject:
		return FailResult{}, errorf(op, CodeProjectNotFound, "no project %q", slug)
	case codeNotHandedOut:
		return FailResult{}, &Error{Op: op, Code: CodeNotHandedOut, Message: "these items are not out (never handed out, done, failed or released)", Items: items()}
	case codeNotClaimant:
		return FailResult{}, &Error{Op: op, Code: CodeNotClaimant, Message: "these items are out with another downloader; only the claimant may report them", Items: items()}
	}
	if code < 0 {
		return FailResult{}, unavailable(op, fmt.Errorf("fail script returned code %d", code))
	}
	return FailResult{Items: int(code), To: replyString(rest[0]), Failed: int(replyInt(rest[1]))}, nil
}

// Where an item is (ItemStatus.State).
const (
	StateTodo      = "todo"
	StateOut       = "out"
	StateDone      = "done"
	StateFailed    = "failed"
	StateOffloaded = "offloaded"
	StateUnknown   = "unknown"
)

// ItemStatus is where one item is, for the public item status route.
type ItemStatus struct {
	Item  string `json:"item"`
	State string `json:"state"`
	// Downloader holds an item that is out.
	Downloader string `json:"downloader,omitempty"`
	// UnindexedSegments, with state unknown, counts the project's on-disk
	// segments that could not be searched (written before segment indexes
	// existed; their frontend indexes them at its next offload passes):
	// the item may be in one of them.
	UnindexedSegments int `json:"unindexed_segments,omitempty"`
}

// ItemStatus says where an item is. An item in an offloaded segment is
// found by the segment's index in Redis (segment_index.go), never by
// reading segment files, so any frontend answers and a look-up costs two
// pipelined round trips whatever is on disk. Done items of a project whose
// done_mode discards them are known for the recent_done window only.
func (e *Engine) ItemStatus(ctx context.Context, slug, item string) (ItemStatus, error) {
	const op = "queues.ItemStatus"
	if err := ValidateSlug(slug); err != nil {
		return ItemStatus{}, err
	}
	if err := ValidateItem(item); err != nil {
		return ItemStatus{}, err
	}
	if _, err := e.Project(ctx, slug); err != nil {
		return ItemStatus{}, err
	}
	// An item can move between Redis and a segment while its segments are
	// searched (an offload or a refill); both change the segments hash, so
	// a changed hash means: ask again. Three tries cover any real traffic.
	var status ItemStatus
	for range 3 {
		var stable bool
		var err error
		if status, stable, err = e.itemStatusOnce(ctx, slug, item); err != nil {
			return ItemStatus{}, unavailable(op, err)
		}
		if stable {
			break
		}
	}
	return status, nil
}

func (e *Engine) itemStatusOnce(ctx context.Context, slug, item string) (ItemStatus, bool, error) {
	// One transaction: every key is in the project's slot, and the item
	// cannot move between two of the reads.
	pipe := e.rdb.TxPipeline()
	claim := pipe.HGet(ctx, ClaimsKey(slug), item)
	failed := pipe.HExists(ctx, FailedKey(slug), item)
	done := pipe.SIsMember(ctx, DoneKey(slug), item)
	recent := pipe.ZScore(ctx, RecentDoneKey(slug), item)
	queued := pipe.SIsMember(ctx, QueuedKey(slug), item)
	scored := pipe.ZScore(ctx, QueueKey(slug, QueueScored), item)
	released := pipe.HExists(ctx, ReleasedKey(slug), item)
	segments := pipe.HGetAll(ctx, SegmentsKey(slug))
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return ItemStatus{}, false, err
	}
	status := ItemStatus{Item: item, State: StateUnknown}
	switch {
	case claim.Err() == nil:
		status.State = StateOut
		if c, ok := parseClaimRecord(item, claim.Val()); ok {
			status.Downloader = c.Downloader
		}
	case failed.Val():
		status.State = StateFailed
	case done.Val() || recent.Err() == nil:
		status.State = StateDone
	case queued.Val() || scored.Err() == nil || released.Val():
		status.State = StateTodo
	default:
		found, stable, err := e.lookUpOffloaded(ctx, slug, item, segments.Val())
		if err != nil {
			return ItemStatus{}, false, err
		}
		if found.found {
			status.State = StateOffloaded
		} else {
			status.UnindexedSegments = found.unindexed
		}
		return status, stable, nil
	}
	return status, true, nil
}
