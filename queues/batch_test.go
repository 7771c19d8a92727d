package queues_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/queues"
)

// batchIDs are the project's claim batches (BatchDeadlinesKey's members).
func batchIDs(t *testing.T, tb bundle) []string {
	t.Helper()
	ids, err := tb.rdb.ZRange(tb.ctx, queues.BatchDeadlinesKey(tb.slug), 0, -1).Result()
	require.NoError(t, err)
	return ids
}

// A claim of 4 or more items shares one deadline (a claim batch); every
// way out of it (done, fail, release, reclaim past the deadline) keeps the
// counts and the indexes exact, and the batch goes with its last item.
func TestClaimBatchEveryWayOut(t *testing.T) {
	patch := queues.SettingsPatch{ReclaimEnabled: ptr(true), ReclaimTTL: ptr(queues.Duration(time.Hour)), FailReportTo: ptr("redo")}
	forEachMode(t, patch, func(t *testing.T, tb bundle, mode string) {
		items := names("b:", 8)
		tb.enqueue(t, todo, items...)
		require.Equal(t, items, tb.claim(t, "alice", 8))
		require.Len(t, batchIDs(t, tb), 1, "one deadline for the 8 items")
		require.Zero(t, tb.rdb.ZCard(tb.ctx, queues.DeadlinesKey(tb.slug)).Val(), "none of their own")
		require.Equal(t, queues.Counts{Out: 8}, tb.counts(t))
		checkIndexesAgree(t, tb)

		claims, _, err := tb.engine.Claims(tb.ctx, tb.slug, queues.ClaimFilter{}, queues.ClaimCursor{}, 100)
		require.NoError(t, err)
		require.Len(t, claims, 8, "the listing has every batched item")
		for i, c := range claims {
			require.Equal(t, items[i], c.Item, "equal deadlines list by name")
			require.Equal(t, "alice", c.Downloader)
			require.Equal(t, tb.clock.Now().Add(time.Hour), c.Deadline)
		}

		res, err := tb.done("alice", items[0], items[1], items[2])
		require.NoError(t, err)
		require.Equal(t, 3, res.New)
		require.Equal(t, queues.Counts{Out: 5, Done: 3}, tb.counts(t))
		checkIndexesAgree(t, tb)

		failed, err := tb.engine.ReportFailure(tb.ctx, queues.FailRequest{Project: tb.slug, Downloader: "alice", Items: []string{items[3]}, Reason: "broken"})
		require.NoError(t, err)
		require.Equal(t, 1, failed.Items)
		released, err := tb.engine.Release(tb.ctx, tb.slug, []string{items[4]}, "")
		require.NoError(t, err)
		require.Equal(t, 1, released.Released)
		c := tb.counts(t)
		require.EqualValues(t, 3, c.Out)
		require.EqualValues(t, 2, c.Redo, "the reported and the released item wait in redo")
		checkIndexesAgree(t, tb)
		tb.clock.Advance(30 * time.Minute)
		require.Equal(t, 1800.0, tb.counts(t).OldestClaimAgeSeconds, "the batch's claim time")

		// Past the deadline the 3 left are due, then reclaimed one by one.
		tb.clock.Advance(31 * time.Minute)
		require.EqualValues(t, 3, tb.counts(t).Reclaimable)
		got := tb.claim(t, "bob", 3)
		require.ElementsMatch(t, []string{items[4], items[3]}, got[:2], "redo first")
		require.Equal(t, items[5], got[2], "then the earliest deadline, the batch's")
		require.Empty(t, batchIDs(t, tb), "a due batch is moved to deadlines")
		require.EqualValues(t, 2, tb.counts(t).Reclaimable)
		checkIndexesAgree(t, tb)
		require.Equal(t, []string{items[6], items[7]}, tb.claim(t, "bob", 2))
		c = tb.counts(t)
		require.EqualValues(t, 5, c.Out)
		require.Zero(t, c.Reclaimable)
		checkIndexesAgree(t, tb)

		// alice, an earlier claimant, still completes a reclaimed item once.
		res, err = tb.done("alice", items[5])
		require.NoError(t, err)
		require.Equal(t, 1, res.New)
		res, err = tb.done("bob", items[3], items[4], items[6], items[7])
		require.NoError(t, err)
		require.Equal(t, 4, res.New)
		require.Equal(t, queues.Counts{Done: 8}, tb.counts(t))
		checkIndexesAgree(t, tb)
	})
}

// The last done of a batch's items removes its deadline and record: a
// warrior's usual multi done leaves nothing behind.
func TestClaimBatchGoesWithItsLastItem(t *testing.T) {
	forEachMode(t, queues.SettingsPatch{}, func(t *testing.T, tb bundle, mode string) {
		first, second := names("f:", 5), names("s:", 6)
		tb.enqueue(t, todo, first...)
		tb.enqueue(t, todo, second...)
		require.Equal(t, first, tb.claim(t, "alice", 5))
		require.Equal(t, second, tb.claim(t, "alice", 6))
		require.Len(t, batchIDs(t, tb), 2)
		// Two batches' items interleaved in one done.
		_, err := tb.done("alice", first[0], second[0], first[1], second[1])
		require.NoError(t, err)
		checkIndexesAgree(t, tb)
		_, err = tb.done("alice", append(first[2:], second[2:]...)...)
		require.NoError(t, err)
		require.Empty(t, batchIDs(t, tb))
		batches, err := tb.rdb.HGetAll(tb.ctx, queues.BatchesKey(tb.slug)).Result()
		require.NoError(t, err)
		require.Equal(t, map[string]string{"seq": "2", "out": "0"}, batches, "no batch is left")
		require.Equal(t, queues.Counts{Done: 11}, tb.counts(t))
		checkIndexesAgree(t, tb)
	})
}

// A done of one item of a batch (a warrior reporting its items one by one)
// counts the batch down: done_plain.lua's one-item path is given no batch
// keys, so it leaves such an item to done.lua.
func TestClaimBatchCountsDownDonesOfOneItem(t *testing.T) {
	forEachMode(t, queues.SettingsPatch{}, func(t *testing.T, tb bundle, mode string) {
		items := names("o:", 5)
		tb.enqueue(t, todo, items...)
		require.Equal(t, items, tb.claim(t, "alice", 5))
		require.Len(t, batchIDs(t, tb), 1)
		for i, item := range items {
			res, err := tb.done("alice", item)
			require.NoError(t, err)
			require.Equal(t, 1, res.New)
			require.Equal(t, queues.Counts{Out: int64(len(items) - 1 - i), Done: int64(i + 1)}, tb.counts(t), "after %d dones", i+1)
			checkIndexesAgree(t, tb)
		}
		require.Empty(t, batchIDs(t, tb), "the batch went with its last item")
	})
}

// A batch's expiry is logged once per item, by the scan or by the claim
// that reclaims it, and a scan that pages through due batches moves the
// ones it passes.
func TestClaimBatchExpiryIsLoggedOnce(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, eventLogPatch())
		require.NoError(t, tb.engine.JoinEventLog(tb.ctx, tb.slug, testGroup))
		var want []string
		for i := range 3 {
			items := names(fmt.Sprintf("e%d:", i), 4)
			tb.enqueue(t, todo, items...)
			require.Equal(t, items, tb.claim(t, "alice", 4))
			for _, it := range items {
				want = append(want, it+"@alice")
			}
			tb.clock.Advance(time.Second)
		}
		require.Len(t, batchIDs(t, tb), 3)
		tb.clock.Advance(time.Hour)

		// One batch is reclaimed (and logged) by a claim before any scan.
		got := tb.claim(t, "bob", 1)
		require.Equal(t, []string{"e0:0000"}, got)
		require.Equal(t, []string{"e0:0000@alice"}, expiries(tb.readAll(t, "f1")))

		// The scan, a batch a call, logs the rest once.
		var logged int
		for calls := 0; ; calls++ {
			require.Less(t, calls, 10)
			n, more, err := tb.engine.ScanExpiredClaims(tb.ctx, tb.slug, 1)
			require.NoError(t, err)
			logged += n
			if !more {
				break
			}
		}
		require.Equal(t, 11, logged)
		require.Empty(t, batchIDs(t, tb))
		all := expiries(tb.readAll(t, "f1"))
		require.Len(t, all, 11)
		require.ElementsMatch(t, want[1:], all)
		checkIndexesAgree(t, tb)
	})
}

// A changed TTL moves a batch's deadline like an item's.
func TestClaimBatchFollowsANewTTL(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{ReclaimEnabled: ptr(true), ReclaimTTL: ptr(queues.Duration(time.Hour))})
		tb.enqueue(t, todo, names("r:", 5)...)
		require.Len(t, tb.claim(t, "alice", 5), 5)
		_, err := tb.engine.UpdateProject(tb.ctx, tb.slug, queues.SettingsPatch{ReclaimTTL: ptr(queues.Duration(2 * time.Hour))})
		require.NoError(t, err)
		tb.clock.Advance(time.Hour + time.Minute)
		requireCode(t, tb.claimErr("bob", 1), queues.CodeNoItem)
		tb.clock.Advance(time.Hour)
		require.Len(t, tb.claim(t, "bob", 5), 5)
		checkIndexesAgree(t, tb)
	})
}

// Claims written by the build before claim batches (a record and a
// deadline per item, whatever the multi) still complete, fail, are
// released and expire as before, beside batched ones.
func TestClaimsOfTheLayoutBeforeBatchesStillEnd(t *testing.T) {
	patch := queues.SettingsPatch{ReclaimEnabled: ptr(true), ReclaimTTL: ptr(queues.Duration(time.Hour))}
	forEachMode(t, patch, func(t *testing.T, tb bundle, mode string) {
		old := names("old:", 8)
		tb.enqueue(t, todo, old...)
		// What the previous claim_plain.lua wrote for a claim of 8: the
		// pop, the queued index, a record and a deadline per item.
		now := tb.clock.Now().UnixMilli()
		record := fmt.Sprintf("1 %d alice 10.0.0.1 - -", now)
		popped, err := tb.rdb.LPopCount(tb.ctx, queues.QueueKey(tb.slug, queues.QueueTodo), 8).Result()
		require.NoError(t, err)
		require.Equal(t, old, popped)
		require.NoError(t, tb.rdb.SRem(tb.ctx, queues.QueuedKey(tb.slug), old).Err())
		for _, it := range old {
			require.NoError(t, tb.rdb.HSet(tb.ctx, queues.ClaimsKey(tb.slug), it, record).Err())
			require.NoError(t, tb.rdb.ZAdd(tb.ctx, queues.DeadlinesKey(tb.slug), redis.Z{Score: float64(now + time.Hour.Milliseconds()), Member: it}).Err())
		}
		fresh := names("new:", 4)
		tb.enqueue(t, todo, fresh...)
		require.Equal(t, fresh, tb.claim(t, "alice", 4))
		require.Equal(t, queues.Counts{Out: 12}, tb.counts(t))
		checkIndexesAgree(t, tb)

		// One done naming both layouts' items.
		res, err := tb.done("alice", old[0], old[1], fresh[0], fresh[1])
		require.NoError(t, err)
		require.Equal(t, 4, res.New)
		_, err = tb.engine.ReportFailure(tb.ctx, queues.FailRequest{Project: tb.slug, Downloader: "alice", Items: []string{old[2]}, Reason: "x"})
		require.NoError(t, err)
		released, err := tb.engine.Release(tb.ctx, tb.slug, []string{old[3]}, "")
		require.NoError(t, err)
		require.Equal(t, 1, released.Released)
		require.EqualValues(t, 6, tb.counts(t).Out)
		checkIndexesAgree(t, tb)

		tb.clock.Advance(time.Hour + time.Second)
		require.EqualValues(t, 6, tb.counts(t).Reclaimable)
		got := tb.claim(t, "bob", 10)
		require.Len(t, got, 7, "the released item, then the 6 due")
		require.EqualValues(t, 7, tb.counts(t).Out)
		checkIndexesAgree(t, tb)
		res, err = tb.done("bob", got...)
		require.NoError(t, err)
		require.Equal(t, 7, res.New)
		require.Equal(t, queues.Counts{Done: 11, Failed: 1}, tb.counts(t))
		checkIndexesAgree(t, tb)
	})
}

// Deleting a project counts items out in batches too.
func TestDeleteCountsBatchedClaims(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{})
		tb.enqueue(t, todo, names("d:", 6)...)
		require.Len(t, tb.claim(t, "alice", 6), 6)
		res, err := tb.engine.DeleteProject(tb.ctx, tb.slug, false)
		requireCode(t, err, queues.CodeClaimsOut)
		require.EqualValues(t, 6, res.ClaimsOut)
	})
}

// doctor names a claim batch count that is not an integer: a done would
// stop on it after its first write.
func TestDoctorChecksClaimBatchCounts(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{})
		tb.enqueue(t, todo, names("k:", 4)...)
		require.Len(t, tb.claim(t, "alice", 4), 4)
		report, err := tb.engine.Doctor(tb.ctx, tb.slug)
		require.NoError(t, err)
		require.Empty(t, report.Problems)
		require.NoError(t, tb.rdb.HSet(tb.ctx, queues.BatchesKey(tb.slug), "n1", "four").Err())
		report, err = tb.engine.Doctor(tb.ctx, tb.slug)
		require.NoError(t, err)
		require.Len(t, report.Problems, 1)
		require.True(t, strings.Contains(report.Problems[0].Problem, "n1"), report.Problems[0].Problem)
	})
}

// The claims listing merges batched items with claims of their own in
// deadline order, and its pages join without a gap or a repeat.
func TestClaimsListingPagesThroughBatches(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{})
		var want []string
		for i := range 3 {
			single, batch := fmt.Sprintf("p%d:single", i), names(fmt.Sprintf("p%d:batch:", i), 5)
			tb.enqueue(t, todo, single)
			require.Equal(t, []string{single}, tb.claim(t, "alice", 1))
			tb.enqueue(t, todo, batch...)
			require.Equal(t, batch, tb.claim(t, "bob", 5))
			// One deadline: the batch's items sort after "p<i>:batch" < "p<i>:single".
			want = append(want, batch...)
			want = append(want, single)
			tb.clock.Advance(time.Second)
		}
		_, err := tb.done("bob", "p1:batch:0002")
		require.NoError(t, err)
		want = slicesDelete(want, "p1:batch:0002")
		for _, limit := range []int{1, 2, 4, 100} {
			var got []string
			cursor := queues.ClaimCursor{}
			for pages := 0; ; pages++ {
				require.Less(t, pages, 100)
				page, next, err := tb.engine.Claims(tb.ctx, tb.slug, queues.ClaimFilter{}, cursor, limit)
				require.NoError(t, err)
				for _, c := range page {
					got = append(got, c.Item)
				}
				if next == (queues.ClaimCursor{}) {
					break
				}
				cursor = next
			}
			require.Equal(t, want, got, "limit %d", limit)
		}
		bobs, _, err := tb.engine.Claims(tb.ctx, tb.slug, queues.ClaimFilter{Downloader: "bob"}, queues.ClaimCursor{}, 100)
		require.NoError(t, err)
		require.Len(t, bobs, 14)
	})
}

func slicesDelete(items []string, drop string) []string {
	out := items[:0:0]
	for _, it := range items {
		if it != drop {
			out = append(out, it)
		}
	}
	return out
}

// During a rolling upgrade a frontend of the build before batches reads a
// batched record as a first claim and completes the item with its own
// done_plain.lua (SADD, HDEL, ZREM), which does not count the batch down:
// "out" reads too high until the batch's deadline, where moving the batch
// to deadlines mends it.
func TestClaimBatchCountMendedAtItsDeadline(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{ReclaimEnabled: ptr(true), ReclaimTTL: ptr(queues.Duration(time.Hour))})
		items := names("m:", 5)
		tb.enqueue(t, todo, items...)
		require.Equal(t, items, tb.claim(t, "alice", 5))
		// The previous build's done_plain.lua's writes for items 0 and 1.
		require.NoError(t, tb.rdb.SAdd(tb.ctx, queues.DoneKey(tb.slug), items[0], items[1]).Err())
		require.NoError(t, tb.rdb.HDel(tb.ctx, queues.ClaimsKey(tb.slug), items[0], items[1]).Err())
		require.NoError(t, tb.rdb.ZRem(tb.ctx, queues.DeadlinesKey(tb.slug), items[0], items[1]).Err())
		require.EqualValues(t, 5, tb.counts(t).Out, "too high until the deadline")

		tb.clock.Advance(time.Hour + time.Second)
		require.Equal(t, items[2:3], tb.claim(t, "bob", 1))
		c := tb.counts(t)
		require.EqualValues(t, 3, c.Out)
		require.EqualValues(t, 2, c.Reclaimable)
		checkIndexesAgree(t, tb)
	})
}
