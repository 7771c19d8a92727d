package queues_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/queues"
)

// TestClaimsListPagesThroughOutByClaimTime: 1,200 claims made in one
// millisecond (more than one read of out) and 300 an hour later are listed
// in claim-time order, each once, whatever the page size, with the fields
// of their claim records; the filters select by downloader and age.
func TestClaimsListPagesThroughOutByClaimTime(t *testing.T) {
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
