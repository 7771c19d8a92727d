package queues_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/queues"
)

// places counts where each item is, from the keys themselves: every item
// must be in exactly one of todo (the queued index or the scored queue),
// out (claims), done and failed.
func (tb bundle) places(t *testing.T, items ...string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, item := range items {
		var at []string
		if ok, err := tb.rdb.SIsMember(tb.ctx, queues.QueuedKey(tb.slug), item).Result(); err == nil && ok {
			at = append(at, "todo")
		}
		if ok, err := tb.rdb.HExists(tb.ctx, queues.ClaimsKey(tb.slug), item).Result(); err == nil && ok {
			at = append(at, "out")
		}
		if ok, err := tb.rdb.SIsMember(tb.ctx, queues.DoneKey(tb.slug), item).Result(); err == nil && ok {
			at = append(at, "done")
		}
		if ok, err := tb.rdb.HExists(tb.ctx, queues.FailedKey(tb.slug), item).Result(); err == nil && ok {
			at = append(at, "failed")
		}
		out[item] = at
	}
	return out
}

// TestItemFailsAfterMaxClaimsAtItsReclaim: with max_claims 3 an item
// claimed three times and never done is not handed out a fourth time: the
// reclaim that would have moves it to failed, once, with who held it and
// when, and the warrior gets the next item instead. The failed count, the
// counter and the item fail rate say so.
func TestItemFailsAfterMaxClaimsAtItsReclaim(t *testing.T) {
	// The budget limit keeps the budget hash, so its counts are checked.
	forEachMode(t, queues.SettingsPatch{ReclaimTTL: ptr(queues.Duration(time.Hour)), MaxClaims: ptr(3), DownloaderBudget: ptr(50)}, func(t *testing.T, tb bundle, mode string) {
		tb.enqueue(t, todo, "bad")
		start := tb.clock.Now()
		require.Equal(t, []string{"bad"}, tb.claim(t, "alice", 1))
		tb.clock.Advance(time.Hour)
		require.Equal(t, []string{"bad"}, tb.claim(t, "bob", 1), "second claim: a reclaim")
		tb.clock.Advance(2 * time.Hour)
		require.Equal(t, []string{"bad"}, tb.claim(t, "carol", 1), "third claim: a reclaim")
		tb.clock.Advance(3 * time.Hour)
		tb.enqueue(t, todo, "good")
		require.Equal(t, []string{"good"}, tb.claim(t, "dave", 2), "the fourth claim goes to failed, not to dave")
		require.Equal(t, map[string][]string{"bad": {"failed"}, "good": {"out"}}, tb.places(t, "bad", "good"))

		c := tb.counts(t)
		require.EqualValues(t, 1, c.Failed)
		require.EqualValues(t, 1, c.Out)
		budget, err := tb.rdb.HGetAll(tb.ctx, queues.BudgetKey(tb.slug)).Result()
		require.NoError(t, err)
		require.Equal(t, map[string]string{"dave": "1"}, budget, "carol's claim left her budget")

		page, next, err := tb.engine.FailedItems(tb.ctx, tb.slug, 0, 10)
		require.NoError(t, err)
		require.Zero(t, next)
		require.Len(t, page, 1)
		f := page[0]
		require.Equal(t, "bad", f.Item)
		require.Equal(t, 3, f.Claims)
		require.Equal(t, queues.FailedMaxClaims, f.Reason)
		require.Equal(t, tb.clock.Now().UnixMilli(), f.At.UnixMilli())
		require.Equal(t, []queues.ClaimEnd{
			{By: "alice", At: start.UTC(), Ended: "expired"},
			{By: "bob", At: start.Add(time.Hour).UTC(), Ended: "expired"},
			{By: "carol", At: start.Add(3 * time.Hour).UTC(), Ended: "expired"},
		}, f.History)
		history, err := tb.rdb.Exists(tb.ctx, queues.HistoryKey(tb.slug)).Result()
		require.NoError(t, err)
		require.Zero(t, history, "the history moved into the failed record")

		// A late done from a claimant of a failed item is refused: it is
		// no longer out, and it stays in one place.
		_, err = tb.done("carol", "bad")
		if mode == queues.DoneKeep {
			requireCode(t, err, queues.CodeNotHandedOut)
		}
		require.Equal(t, []string{"failed"}, tb.places(t, "bad")["bad"])

		_, err = tb.done("dave", "good")
		require.NoError(t, err)
		stats, err := tb.engine.Stats(tb.ctx, tb.slug)
		require.NoError(t, err)
		require.EqualValues(t, 1, stats.Counters["items_failed"])
		require.EqualValues(t, 1, stats.Counts.Failed)
		require.InDelta(t, 0.5, stats.ItemFailRate, 1e-9, "one failed, one done")

		// Queuing it again while it is failed changes nothing.
		require.Equal(t, 1, tb.enqueueResult(t, todo, "bad").Skipped)
		require.Equal(t, []string{"failed"}, tb.places(t, "bad")["bad"])
	})
}

// TestMaxClaimsOffKeepsReclaiming: a project made before max_claims (no
// field in its config) reads 0 and reclaims forever, and so does one
// with max_claims 0; a new project gets the default.
func TestMaxClaimsOffKeepsReclaiming(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		fresh := setupProject(t, b, "fresh", queues.SettingsPatch{})
		p, err := fresh.engine.Project(fresh.ctx, fresh.slug)
		require.NoError(t, err)
		require.Equal(t, queues.DefaultMaxClaims, p.MaxClaims)
		require.Equal(t, queues.FailToFailed, p.FailReportTo)

		old := setupProject(t, b, "old", queues.SettingsPatch{ReclaimTTL: ptr(queues.Duration(time.Minute))})
		require.NoError(t, old.rdb.HDel(old.ctx, queues.ConfigKey(old.slug), "max_claims", "fail_report_to").Err())
		p, err = old.engine.Project(old.ctx, old.slug)
		require.NoError(t, err)
		require.Zero(t, p.MaxClaims, "a project older than the setting keeps it off")

		old.enqueue(t, todo, "x")
		for i := range 2 * queues.DefaultMaxClaims {
			require.Equal(t, []string{"x"}, old.claim(t, fmt.Sprintf("warrior%d", i), 1), "claim %d", i+1)
			old.clock.Advance(time.Duration(i+1) * time.Minute)
		}
		require.Zero(t, old.counts(t).Failed)
		record, err := old.rdb.HGet(old.ctx, queues.ClaimsKey(old.slug), "x").Result()
		require.NoError(t, err)
		require.Contains(t, record, fmt.Sprintf("%d ", 2*queues.DefaultMaxClaims))

		_, err = old.engine.UpdateProject(old.ctx, old.slug, queues.SettingsPatch{MaxClaims: ptr(-1)})
		requireCode(t, err, queues.CodeInvalid)
		_, err = old.engine.UpdateProject(old.ctx, old.slug, queues.SettingsPatch{FailReportTo: ptr("trash")})
		requireCode(t, err, queues.CodeInvalid)
		p, err = old.engine.Project(old.ctx, old.slug)
		require.NoError(t, err)
		require.Zero(t, p.MaxClaims, "a refused setting changes nothing")
	})
}

// TestReleaseAtMaxClaimsFails: a release of an item claimed max_claims
// times sends it to failed, not to redo; one claimed fewer times goes to
// redo and its count continues, so it fails at its next release.
func TestReleaseAtMaxClaimsFails(t *testing.T) {
	forEachMode(t, queues.SettingsPatch{MaxClaims: ptr(2)}, func(t *testing.T, tb bundle, mode string) {
		tb.enqueue(t, todo, "x")
		tb.claim(t, "alice", 1)
		res, err := tb.engine.Release(tb.ctx, tb.slug, []string{"x"}, "")
		require.NoError(t, err)
		require.Equal(t, queues.ReleaseResult{Released: 1}, res)
		require.Equal(t, []string{"todo"}, tb.places(t, "x")["x"])
		require.Equal(t, []string{"x"}, tb.claim(t, "bob", 1))
		res, err = tb.engine.Release(tb.ctx, tb.slug, []string{"x"}, "bob")
		require.NoError(t, err)
		require.Equal(t, queues.ReleaseResult{Released: 1, Failed: 1}, res)
		require.Equal(t, []string{"failed"}, tb.places(t, "x")["x"])
		requireCode(t, tb.claimErr("carol", 1), queues.CodeNoItem)

		page, _, err := tb.engine.FailedItems(tb.ctx, tb.slug, 0, 10)
		require.NoError(t, err)
		require.Len(t, page, 1)
		require.Equal(t, 2, page[0].Claims)
		require.Equal(t, []string{"released", "released"}, []string{page[0].History[0].Ended, page[0].History[1].Ended})
		require.Equal(t, []string{"alice", "bob"}, []string{page[0].History[0].By, page[0].History[1].By})
	})
}

// TestRequeuedFailedItemIsServedAgain: a requeued failed item goes to the
// queue named, its claim count starting again (it may fail max_claims
// times more), and is served and completed; a delete removes it for good;
// naming items that are not failed changes nothing.
func TestRequeuedFailedItemIsServedAgain(t *testing.T) {
	forEachMode(t, queues.SettingsPatch{ReclaimTTL: ptr(queues.Duration(time.Hour)), MaxClaims: ptr(1)}, func(t *testing.T, tb bundle, mode string) {
		tb.enqueue(t, todo, "a", "b", "c")
		require.Len(t, tb.claim(t, "alice", 3), 3)
		tb.clock.Advance(time.Hour)
		requireCode(t, tb.claimErr("bob", 3), queues.CodeNoItem)
		require.EqualValues(t, 3, tb.counts(t).Failed)

		res, err := tb.engine.RequeueFailed(tb.ctx, tb.slug, queues.QueueSecondary, []string{"a", "zz"})
		require.NoError(t, err)
		require.Equal(t, queues.FailedMoveResult{Moved: 1, NotFailed: 1}, res)
		c := tb.counts(t)
		require.EqualValues(t, 1, c.Secondary)
		require.EqualValues(t, 2, c.Failed)
		require.Equal(t, []string{"a"}, tb.claim(t, "bob", 1), "served again")
		record, err := tb.rdb.HGet(tb.ctx, queues.ClaimsKey(tb.slug), "a").Result()
		require.NoError(t, err)
		require.Contains(t, record, "1 ", "its claim count starts again")
		_, err = tb.done("bob", "a")
		require.NoError(t, err)

		res, err = tb.engine.DeleteFailed(tb.ctx, tb.slug, []string{"b"})
		require.NoError(t, err)
		require.Equal(t, queues.FailedMoveResult{Moved: 1}, res)
		require.Empty(t, tb.places(t, "b")["b"], "deleted: in no place")

		// An empty list requeues every failed item.
		res, err = tb.engine.RequeueFailed(tb.ctx, tb.slug, queues.QueueTodo, nil)
		require.NoError(t, err)
		require.Equal(t, queues.FailedMoveResult{Moved: 1}, res)
		require.Equal(t, []string{"todo"}, tb.places(t, "c")["c"])

		_, err = tb.engine.RequeueFailed(tb.ctx, tb.slug, queues.QueueScored, []string{"c"})
		requireCode(t, err, queues.CodeInvalid)
		_, err = tb.engine.RequeueFailed(tb.ctx, "nope", queues.QueueTodo, []string{"c"})
		requireCode(t, err, queues.CodeProjectNotFound)
		_, _, err = tb.engine.FailedItems(tb.ctx, tb.slug, 0, 0)
		requireCode(t, err, queues.CodeInvalid)
	})
}

// TestFailReportFromClaimantOnly: a failure report is accepted from the
// item's current claimant and sends it to failed at once with the reason;
// a report from anyone else, or for an item not out, is refused and
// changes nothing. With fail_report_to redo the item goes back to redo,
// its count continuing, until it reaches max_claims.
func TestFailReportFromClaimantOnly(t *testing.T) {
	forEachMode(t, queues.SettingsPatch{ReclaimTTL: ptr(queues.Duration(time.Hour)), MaxClaims: ptr(2)}, func(t *testing.T, tb bundle, mode string) {
		tb.enqueue(t, todo, "x", "y")
		require.Equal(t, []string{"x"}, tb.claim(t, "alice", 1))
		snapshot := tb.places(t, "x", "y")

		_, err := tb.engine.ReportFailure(tb.ctx, queues.FailRequest{Project: tb.slug, Downloader: "mallory", Items: []string{"x"}, Reason: "no"})
		requireCode(t, err, queues.CodeNotClaimant)
		_, err = tb.engine.ReportFailure(tb.ctx, queues.FailRequest{Project: tb.slug, Downloader: "alice", Items: []string{"x", "y"}, Reason: "no"})
		requireCode(t, err, queues.CodeNotHandedOut) // y is queued, not out: the whole report is refused
		_, err = tb.engine.ReportFailure(tb.ctx, queues.FailRequest{Project: tb.slug, Downloader: "alice", Items: []string{"x"}, Reason: "bad\x1b[2J"})
		requireCode(t, err, queues.CodeInvalid)
		require.Equal(t, snapshot, tb.places(t, "x", "y"), "refused reports change nothing")
		require.EqualValues(t, 1, tb.counts(t).Out)

		res, err := tb.engine.ReportFailure(tb.ctx, queues.FailRequest{Project: tb.slug, Downloader: "alice", Items: []string{"x"}, Reason: "HTTP 403, every time (100%)"})
		require.NoError(t, err)
		require.Equal(t, queues.FailResult{Items: 1, To: queues.FailToFailed, Failed: 1}, res)
		require.Equal(t, []string{"failed"}, tb.places(t, "x")["x"])
		page, _, err := tb.engine.FailedItems(tb.ctx, tb.slug, 0, 10)
		require.NoError(t, err)
		require.Len(t, page, 1)
		require.Equal(t, queues.FailedReported, page[0].Reason)
		require.Equal(t, "HTTP 403, every time (100%)", page[0].Message)
		require.Equal(t, []queues.ClaimEnd{{By: "alice", At: tb.clock.Now().UTC(), Ended: "reported", Reason: "HTTP 403, every time (100%)"}}, page[0].History)

		_, err = tb.engine.UpdateProject(tb.ctx, tb.slug, queues.SettingsPatch{FailReportTo: ptr(queues.FailToRedo)})
		require.NoError(t, err)
		require.Equal(t, []string{"y"}, tb.claim(t, "bob", 1))
		res, err = tb.engine.ReportFailure(tb.ctx, queues.FailRequest{Project: tb.slug, Downloader: "bob", Items: []string{"y"}, Reason: "timeout"})
		require.NoError(t, err)
		require.Equal(t, queues.FailResult{Items: 1, To: queues.FailToRedo}, res)
		require.Equal(t, []string{"todo"}, tb.places(t, "y")["y"])
		require.EqualValues(t, 1, tb.counts(t).Redo)
		require.Equal(t, []string{"y"}, tb.claim(t, "carol", 1), "back at once, not after the TTL")
		res, err = tb.engine.ReportFailure(tb.ctx, queues.FailRequest{Project: tb.slug, Downloader: "carol", Items: []string{"y"}, Reason: "timeout again"})
		require.NoError(t, err)
		require.Equal(t, queues.FailResult{Items: 1, To: queues.FailToRedo, Failed: 1}, res, "its second claim was its last")
		require.Equal(t, []string{"failed"}, tb.places(t, "y")["y"])
		stats, err := tb.engine.Stats(tb.ctx, tb.slug)
		require.NoError(t, err)
		require.EqualValues(t, 3, stats.Counters["items_fail_reported"])
		require.EqualValues(t, 2, stats.Counters["items_failed"])
	})
}

// TestItemStatusInEachPlace: the item status says todo, out (with the
// claimant), done, failed and unknown as the item moves; an unknown
// project and a malformed name are errors.
func TestItemStatusInEachPlace(t *testing.T) {
	forEachMode(t, queues.SettingsPatch{MaxClaims: ptr(1)}, func(t *testing.T, tb bundle, mode string) {
		state := func(item string) queues.ItemStatus {
			s, err := tb.engine.ItemStatus(tb.ctx, tb.slug, item)
			require.NoError(t, err)
			return s
		}
		require.Equal(t, queues.ItemStatus{Item: "x", State: queues.StateUnknown}, state("x"))
		tb.enqueue(t, todo, "x", "y")
		require.Equal(t, queues.StateTodo, state("x").State)
		tb.claim(t, "alice", 2)
		require.Equal(t, queues.ItemStatus{Item: "x", State: queues.StateOut, Downloader: "alice"}, state("x"))
		_, err := tb.done("alice", "x")
		require.NoError(t, err)
		require.Equal(t, queues.StateDone, state("x").State)
		_, err = tb.engine.ReportFailure(tb.ctx, queues.FailRequest{Project: tb.slug, Downloader: "alice", Items: []string{"y"}, Reason: "gone"})
		require.NoError(t, err)
		require.Equal(t, queues.StateFailed, state("y").State)

		_, err = tb.engine.ItemStatus(tb.ctx, "nope", "x")
		requireCode(t, err, queues.CodeProjectNotFound)
		_, err = tb.engine.ItemStatus(tb.ctx, tb.slug, "bad\nname")
		requireCode(t, err, queues.CodeInvalid)
	})
}

// TestFailedItemIsNotQueuedAgain: while an item is failed, neither an
// admin add nor a backfeed (whose Bloom filter never saw it) nor a
// registered add queues it beside its failed record.
func TestFailedItemIsNotQueuedAgain(t *testing.T) {
	forEachMode(t, queues.SettingsPatch{BackfeedSecret: ptr("sekrit_12345")}, func(t *testing.T, tb bundle, mode string) {
		tb.enqueue(t, todo, "x")
		tb.claim(t, "alice", 1)
		_, err := tb.engine.ReportFailure(tb.ctx, queues.FailRequest{Project: tb.slug, Downloader: "alice", Items: []string{"x"}})
		require.NoError(t, err)

		require.Equal(t, 1, tb.enqueueResult(t, todo, "x").Skipped)
		res, err := tb.engine.Backfeed(tb.ctx, tb.slug, "sekrit_12345", []string{"x", "y"})
		require.NoError(t, err)
		require.Equal(t, 1, res.New, "y only")
		res, err = tb.engine.EnqueueRegistered(tb.ctx, tb.slug, queues.QueueTodo, []string{"x"})
		require.NoError(t, err)
		require.Zero(t, res.New)
		require.Equal(t, []string{"failed"}, tb.places(t, "x")["x"])
	})
}

// failOne claims item (it must be the next one served) as alice and reports
// it failed, so it is in failed and nowhere else.
func (tb bundle) failOne(t *testing.T, item string) {
	t.Helper()
	require.Equal(t, []string{item}, tb.claim(t, "alice", 1))
	_, err := tb.engine.ReportFailure(tb.ctx, queues.FailRequest{Project: tb.slug, Downloader: "alice", Items: []string{item}})
	require.NoError(t, err)
	require.Equal(t, []string{"failed"}, tb.places(t, item)[item])
}

// TestFailedItemIsNotScoredAgain: the scored queue (enqueue_scored.lua)
// skips a failed item as the FIFO queues do, and queues the others.
func TestFailedItemIsNotScoredAgain(t *testing.T) {
	forEachMode(t, queues.SettingsPatch{}, func(t *testing.T, tb bundle, mode string) {
		tb.enqueue(t, todo, "x")
		tb.failOne(t, "x")
		res := tb.enqueueScored(t, map[string]float64{"x": 5, "y": 1})
		require.Equal(t, queues.ScoredResult{Queued: 1, Skipped: 1, Length: 1}, res)
		require.Equal(t, []string{"y"}, tb.claim(t, "bob", 2), "the failed item is not served")
		require.Equal(t, []string{"failed"}, tb.places(t, "x")["x"])
		require.EqualValues(t, 1, tb.counts(t).Failed)
	})
}

// TestFailedItemIsNotImportedAgain: importing another tracker's done items
// or claims (import_state.lua) skips a failed item: it is neither made
// done nor handed to the imported claimant beside its failed record.
func TestFailedItemIsNotImportedAgain(t *testing.T) {
	forEachMode(t, queues.SettingsPatch{}, func(t *testing.T, tb bundle, mode string) {
		tb.enqueue(t, todo, "x", "y")
		tb.failOne(t, "x")
		res, err := tb.engine.ImportClaims(tb.ctx, tb.slug, []queues.ImportedClaim{
			{Item: "x", Downloader: "bobby", ClaimedAt: tb.clock.Now()},
			{Item: "z", Downloader: "bobby", ClaimedAt: tb.clock.Now()},
		})
		require.NoError(t, err)
		require.Equal(t, queues.ImportResult{Imported: 1, Skipped: 1}, res)
		res, err = tb.engine.ImportDone(tb.ctx, tb.slug, []string{"x", "old"})
		require.NoError(t, err)
		require.Equal(t, queues.ImportResult{Imported: 1, Skipped: 1}, res)
		require.Equal(t, []string{"failed"}, tb.places(t, "x")["x"])
		c := tb.counts(t)
		require.EqualValues(t, 1, c.Failed)
		require.EqualValues(t, 1, c.Out, "z only")
	})
}

// TestFailedItemOnDiskIsDroppedAtRefill: an item whose copy sits in an
// offloaded segment, queued again meanwhile (the scored queue serves it
// first), claimed and reported failed, is dropped when its segment comes
// back (refill.lua): it is never served again, and every other item is
// served once.
func TestFailedItemOnDiskIsDroppedAtRefill(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{OffloadAbove: ptr(4000), OffloadSegment: ptr(1000)})
		o := offloader(tb, t)
		items := names("url:", 6000)
		tb.enqueue(t, todo, items...)
		require.NoError(t, o.RunOnce(tb.ctx))
		require.Positive(t, tb.counts(t).Offloaded)

		inRedis, err := tb.rdb.LRange(tb.ctx, queues.QueueKey(tb.slug, queues.QueueTodo), 0, -1).Result()
		require.NoError(t, err)
		waiting := map[string]bool{}
		for _, item := range inRedis {
			waiting[item] = true
		}
		onDisk := ""
		for _, item := range items {
			if !waiting[item] {
				onDisk = item
				break
			}
		}
		require.NotEmpty(t, onDisk, "some item is on disk only")
		require.Equal(t, 1, tb.enqueueScored(t, map[string]float64{onDisk: 1}).Queued)
		tb.failOne(t, onDisk)

		seen := claimEverything(t, tb, o)
		require.Zero(t, seen[onDisk], "the failed item's disk copy is not served")
		require.Len(t, seen, len(items)-1)
		for item, times := range seen {
			require.Equal(t, 1, times, item)
		}
		require.Equal(t, queues.Counts{Done: int64(len(items) - 1), Failed: 1}, tb.counts(t))
		require.Equal(t, []string{"failed"}, tb.places(t, onDisk)[onDisk])
	})
}
