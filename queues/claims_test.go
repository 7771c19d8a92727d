package queues_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/queues"
)

// TestClaimsListPagesThroughTheDeadlines: 1,200 claims made in one
// millisecond (more than one read of the deadlines) and 300 an hour later
// are listed in deadline order, which under one TTL is claim-time order,
// each once, whatever the page size, with the fields of their claim
// records; the filters select by downloader and age.
func TestClaimsListPagesThroughTheDeadlines(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{})
		names := make([]string, 1500)
		for i := range names {
			names[i] = fmt.Sprintf("item-%04d", i)
		}
		tb.enqueue(t, queues.Target{}, names...)
		start := tb.clock.Now()
		for range 12 {
			require.Len(t, tb.claim(t, "alice", 100), 100)
		}
		tb.clock.Advance(time.Hour)
		for range 3 {
			require.Len(t, tb.claim(t, "bob_1", 100), 100)
		}

		all := func(filter queues.ClaimFilter, limit int) []queues.Claim {
			var got []queues.Claim
			cursor := queues.ClaimCursor{}
			for pages := 0; ; pages++ {
				require.Less(t, pages, 2000, "the listing does not end")
				page, next, err := tb.engine.Claims(tb.ctx, tb.slug, filter, cursor, limit)
				require.NoError(t, err)
				require.LessOrEqual(t, len(page), limit)
				got = append(got, page...)
				if next == (queues.ClaimCursor{}) {
					return got
				}
				// The cursor survives a round trip through its text form.
				cursor, err = queues.ParseClaimCursor(next.String())
				require.NoError(t, err)
			}
		}
		for _, limit := range []int{7, 100, 1000, queues.MaxClaimsPage} {
			got := all(queues.ClaimFilter{}, limit)
			require.Len(t, got, 1500, "limit %d", limit)
			seen := map[string]bool{}
			for i, c := range got {
				require.False(t, seen[c.Item], "limit %d: %s listed twice", limit, c.Item)
				seen[c.Item] = true
				if i > 0 {
					require.False(t, c.ClaimedAt.Before(got[i-1].ClaimedAt), "limit %d: not in claim order at %d", limit, i)
				}
			}
		}
		got := all(queues.ClaimFilter{}, 1000)
		first, last := got[0], got[len(got)-1]
		require.Equal(t, "alice", first.Downloader)
		require.Equal(t, start.UnixMilli(), first.ClaimedAt.UnixMilli())
		require.Equal(t, 1, first.TimesClaimed)
		require.Equal(t, "127.0.0.1", first.IP)
		require.Equal(t, start.Add(queues.DefaultReclaimTTL).UnixMilli(), first.Deadline.UnixMilli())
		require.Equal(t, "bob_1", last.Downloader)
		require.Equal(t, start.Add(time.Hour).UnixMilli(), last.ClaimedAt.UnixMilli())

		bobs := all(queues.ClaimFilter{Downloader: "bob_1"}, 50)
		require.Len(t, bobs, 300)
		for _, c := range bobs {
			require.Equal(t, "bob_1", c.Downloader)
		}
		old := all(queues.ClaimFilter{OlderThan: 30 * time.Minute}, 500)
		require.Len(t, old, 1200)
		for _, c := range old {
			require.Equal(t, "alice", c.Downloader)
		}
		none := all(queues.ClaimFilter{OlderThan: 2 * time.Hour}, 500)
		require.Empty(t, none)

		var exported int
		require.NoError(t, tb.engine.EachClaim(tb.ctx, tb.slug, queues.ClaimFilter{}, func(queues.Claim) bool {
			exported++
			return true
		}))
		require.Equal(t, 1500, exported)
		stopped := 0
		require.NoError(t, tb.engine.EachClaim(tb.ctx, tb.slug, queues.ClaimFilter{}, func(queues.Claim) bool {
			stopped++
			return stopped < 10
		}))
		require.Equal(t, 10, stopped)

		// Bad input: a clear error, nothing listed.
		_, _, err := tb.engine.Claims(tb.ctx, "nosuch", queues.ClaimFilter{}, queues.ClaimCursor{}, 10)
		require.Equal(t, queues.CodeProjectNotFound, queues.CodeOf(err))
		_, _, err = tb.engine.Claims(tb.ctx, tb.slug, queues.ClaimFilter{OlderThan: -time.Second}, queues.ClaimCursor{}, 10)
		require.ErrorContains(t, err, "older_than must not be negative")
		_, _, err = tb.engine.Claims(tb.ctx, tb.slug, queues.ClaimFilter{Downloader: "x"}, queues.ClaimCursor{}, 10)
		require.Equal(t, queues.CodeInvalid, queues.CodeOf(err))
		_, _, err = tb.engine.Claims(tb.ctx, tb.slug, queues.ClaimFilter{}, queues.ClaimCursor{}, 0)
		require.ErrorContains(t, err, "limit must be between")
		_, err = queues.ParseClaimCursor("abc")
		require.ErrorContains(t, err, "bad cursor")
	})
}

// TestClaimsListSkipsClaimsThatEnded: an item completed between the read
// of out and the read of its record is left out, not listed half-known.
func TestClaimsListSkipsClaimsThatEnded(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{})
		tb.enqueue(t, queues.Target{}, "a", "b", "c")
		claimed := tb.claim(t, "alice", 3)
		_, err := tb.done("alice", claimed[1])
		require.NoError(t, err)
		page, next, err := tb.engine.Claims(context.Background(), tb.slug, queues.ClaimFilter{}, queues.ClaimCursor{}, 10)
		require.NoError(t, err)
		require.Equal(t, queues.ClaimCursor{}, next)
		require.Len(t, page, 2)
		for _, c := range page {
			require.NotEqual(t, claimed[1], c.Item)
		}
	})
}

// TestOutOfThePreviousBuildIsMergedIntoDeadlines: a project written by a
// build from before out and deadlines were one set (its claims in out as
// well, a claim imported with no reclaim TTL in out only, and entries of
// claims completed by a new frontend while an old one still wrote out) is
// merged a slice of 100 per claim: the imported claim gets its deadline
// from its record, out goes, and every claim is listed, counted and
// completed as before.
func TestOutOfThePreviousBuildIsMergedIntoDeadlines(t *testing.T) {
	forEachMode(t, queues.SettingsPatch{}, func(t *testing.T, tb bundle, mode string) {
		tb.enqueue(t, todo, names("n:", 10)...)
		start := tb.clock.Now()
		held := tb.claim(t, "alice", 3)
		legacy := []redis.Z{}
		for _, item := range held {
			legacy = append(legacy, redis.Z{Score: float64(start.UnixMilli()), Member: item})
		}
		imported := start.Add(-time.Hour)
		legacy = append(legacy, redis.Z{Score: float64(imported.UnixMilli()), Member: "imported"})
		require.NoError(t, tb.rdb.HSet(tb.ctx, queues.ClaimsKey(tb.slug), "imported",
			fmt.Sprintf("1 %d old_tracker 10.0.0.9 - -", imported.UnixMilli())).Err())
		for i := range 150 {
			legacy = append(legacy, redis.Z{Score: float64(start.Add(-2 * time.Hour).UnixMilli()), Member: fmt.Sprintf("completed-%03d", i)})
		}
		out := queues.LegacyOutKey(tb.slug)
		require.NoError(t, tb.rdb.ZAdd(tb.ctx, out, legacy...).Err())
		require.EqualValues(t, 3, tb.counts(t).Out, "the imported claim has no deadline yet")

		// Claimed through a frontend that read the settings after out
		// appeared: a frontend's copy for the plain claim is at most
		// plainConfigRefresh (1 s) old, and one that finds out claims
		// with claim.lua, which merges it.
		tb.engine = queues.NewEngine(tb.rdb, queues.Options{Clock: tb.clock, Logger: quietLogger})
		require.Len(t, tb.claim(t, "bob_1", 1), 1)
		require.EqualValues(t, 54, tb.rdb.ZCard(tb.ctx, out).Val(), "one claim merges 100")
		require.Len(t, tb.claim(t, "bob_1", 1), 1)
		require.Zero(t, tb.rdb.Exists(tb.ctx, out).Val(), "merged and gone")

		c := tb.counts(t)
		require.EqualValues(t, 6, c.Out)
		require.Equal(t, time.Hour.Seconds(), c.OldestClaimAgeSeconds, "the imported claim, from its record")
		page, _, err := tb.engine.Claims(tb.ctx, tb.slug, queues.ClaimFilter{}, queues.ClaimCursor{}, 10)
		require.NoError(t, err)
		require.Len(t, page, 6)
		require.Equal(t, "imported", page[0].Item)
		require.Equal(t, imported.UnixMilli(), page[0].ClaimedAt.UnixMilli())
		require.Equal(t, imported.Add(queues.DefaultReclaimTTL).UnixMilli(), page[0].Deadline.UnixMilli())
		checkIndexesAgree(t, tb)

		res, err := tb.done("alice", held...)
		require.NoError(t, err)
		require.Equal(t, 3, res.New)
		res, err = tb.done("old_tracker", "imported")
		require.NoError(t, err)
		require.Equal(t, 1, res.New)
		require.Equal(t, queues.Counts{Todo: 5, Out: 2, Done: 4}, tb.counts(t))
		checkIndexesAgree(t, tb)
	})
}

// TestAgeFiltersReadTheClaimTimeFromTheRecord: a reclaimed item's deadline
// is TTL x times claimed after its claim, so it sorts after a newer first
// claim; listing and releasing by age still select by the recorded claim
// time, and the oldest claim's age is read from the earliest deadline.
func TestAgeFiltersReadTheClaimTimeFromTheRecord(t *testing.T) {
	forEachMode(t, queues.SettingsPatch{}, func(t *testing.T, tb bundle, mode string) {
		tb.enqueue(t, todo, "x", "z")
		require.Equal(t, []string{"x"}, tb.claim(t, "alice", 1))
		tb.clock.Advance(queues.DefaultReclaimTTL)
		require.Equal(t, []string{"z"}, tb.claim(t, "carol", 1), "fresh items come before reclaims")
		require.Equal(t, []string{"x"}, tb.claim(t, "bobby", 1), "reclaimed: due again in two TTLs")
		tb.clock.Advance(time.Hour)
		tb.enqueue(t, todo, "y")
		require.Equal(t, []string{"y"}, tb.claim(t, "dave_", 1))
		tb.clock.Advance(time.Hour)

		all, _, err := tb.engine.Claims(tb.ctx, tb.slug, queues.ClaimFilter{}, queues.ClaimCursor{}, 10)
		require.NoError(t, err)
		order := []string{}
		for _, c := range all {
			order = append(order, c.Item)
		}
		require.Equal(t, []string{"z", "y", "x"}, order, "earliest deadline first")
		require.Equal(t, 2*time.Hour.Seconds(), tb.counts(t).OldestClaimAgeSeconds, "z heads the deadlines")

		old, _, err := tb.engine.Claims(tb.ctx, tb.slug, queues.ClaimFilter{OlderThan: 90 * time.Minute}, queues.ClaimCursor{}, 10)
		require.NoError(t, err)
		require.Len(t, old, 2)
		require.ElementsMatch(t, []string{"z", "x"}, []string{old[0].Item, old[1].Item})

		res, err := tb.engine.ReleaseClaims(tb.ctx, tb.slug, queues.ReleaseFilter{OlderThan: 90 * time.Minute})
		require.NoError(t, err)
		require.Equal(t, queues.ReleaseResult{Released: 2}, res)
		assertPlaces(t, tb, map[string]string{"x": "todo:redo", "z": "todo:redo", "y": "out"})
		checkIndexesAgree(t, tb)
	})
}
