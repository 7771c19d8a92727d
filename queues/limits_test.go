package queues_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/queues"
)

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%04d", prefix, i)
	}
	return out
}

func TestDownloaderAndIPRateLimits(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{DownloaderRatePerMinute: ptr(60.0), IPRatePerMinute: ptr(120.0), IPRateBurst: ptr(3)})
		tb.enqueue(t, todo, names("i", 50)...)
		claim := func(d, ip string) error {
			_, err := tb.engine.Claim(tb.ctx, queues.ClaimRequest{Project: tb.slug, Downloader: d, IP: ip, Count: 1})
			return err
		}
		require.NoError(t, claim("alice", "10.0.0.1"))
		err := claim("alice", "10.0.0.2")
		requireCode(t, err, queues.CodeRateLimited) // alice: 1/s
		require.NoError(t, claim("bobby", "10.0.0.1"))
		require.NoError(t, claim("carol", "10.0.0.1")) // the IP's burst of 3
		err = claim("davey", "10.0.0.1")
		requireCode(t, err, queues.CodeRateLimited)
		var qe *queues.Error
		require.ErrorAs(t, err, &qe)
		require.Equal(t, 500*time.Millisecond, qe.RetryAfter)
		// A refused request charged no limit: davey from elsewhere passes.
		require.NoError(t, claim("davey", "10.0.0.9"))
		tb.clock.Advance(500 * time.Millisecond)
		require.NoError(t, claim("erin1", "10.0.0.1"))
		require.EqualValues(t, 50-5, tb.counts(t).Todo)
	})
}

// TestPatternLimitKeepsTheRestFlowing: 90% of todo is limited to a trickle;
// every request is still served from the rest, and the limited group gets
// exactly its rate.
func TestPatternLimitKeepsTheRestFlowing(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{})
		var items []string
		for i := range 1000 {
			if i%10 == 0 {
				items = append(items, fmt.Sprintf("url:https://small.example/page/%d", i))
			} else {
				items = append(items, fmt.Sprintf("url:https://huge.example/page/%d?x=/y", i))
			}
		}
		tb.enqueue(t, todo, items...)
		res, err := tb.engine.SetLimitGroups(tb.ctx, tb.slug, []queues.LimitGroup{
			{Name: "huge", Glob: "url:https://huge.example/*", RatePerMinute: 60, Burst: 2},
		})
		require.NoError(t, err)
		require.Equal(t, 900, res.Moved, "queued items were re-routed to the group's sub-queue")
		require.EqualValues(t, 1000, tb.counts(t).Todo, "sub-queues count as todo")
		stats, err := tb.engine.Stats(tb.ctx, tb.slug)
		require.NoError(t, err)
		require.Len(t, stats.Groups, 1)
		require.EqualValues(t, 900, stats.Groups[0].Queued)

		huge, small := 0, 0
		for range 100 {
			got := tb.claim(t, "alice", 1)
			require.Len(t, got, 1, "every request is served")
			if strings.Contains(got[0], "huge") {
				huge++
			} else {
				small++
			}
		}
		require.Equal(t, 2, huge, "the group's burst, then nothing until its clock moves")
		require.Equal(t, 98, small)
		tb.clock.Advance(3 * time.Second)
		got := tb.claim(t, "alice", 10)
		hugeNow := 0
		for _, g := range got {
			if strings.Contains(g, "huge") {
				hugeNow++
			}
		}
		require.Equal(t, 2, hugeNow, "3 s at 1/s with a burst of 2 allows 2")
		checkIndexesAgree(t, tb)
	})
}

func TestTypeLimitHitServesReclaimsFirst(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{ReclaimEnabled: ptr(true), ReclaimTTL: ptr(queues.Duration(time.Hour))})
		_, err := tb.engine.SetLimitGroups(tb.ctx, tb.slug, []queues.LimitGroup{{Name: "users", Type: "user", RatePerMinute: 0}})
		require.NoError(t, err)
		tb.enqueue(t, todo, "post:1", "post:2")
		require.Equal(t, []string{"post:1"}, tb.claim(t, "alice", 1))
		tb.clock.Advance(2 * time.Hour)
		// No user: items waiting: todo is served before reclaims.
		require.Equal(t, []string{"post:2"}, tb.claim(t, "bobby", 1))
		tb.enqueue(t, todo, "user:a", "post:3")
		// The user group is held back (rate 0) with items waiting: the due
		// reclaim now comes before todo.
		require.Equal(t, []string{"post:1"}, tb.claim(t, "carol", 1))
		require.Equal(t, []string{"post:3"}, tb.claim(t, "carol", 1))
		err = tb.claimErr("carol", 1)
		requireCode(t, err, queues.CodeNoItem)
		require.Contains(t, err.Error(), "rate-limited")
		require.EqualValues(t, 1, tb.counts(t).Todo)
	})
}

func TestChangingGroupsReroutesBothWays(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{})
		_, err := tb.engine.SetLimitGroups(tb.ctx, tb.slug, []queues.LimitGroup{{Name: "users", Type: "user", RatePerMinute: 0}})
		require.NoError(t, err)
		tb.enqueue(t, todo, "user:a", "post:1", "user:b")
		tb.enqueue(t, queues.Target{Queue: queues.QueueSecondary}, "user:c")
		require.Equal(t, []string{"post:1"}, tb.claim(t, "alice", 5))
		tb.enqueue(t, queues.Target{Queue: queues.QueueSecondary}, "tag:x")
		assertPlaces(t, tb, map[string]string{"user:a": "todo:g:users", "user:b": "todo:g:users", "user:c": "todo:secondary:g:users", "tag:x": "todo:secondary"})

		// A new pattern takes tags; users are no longer limited.
		res, err := tb.engine.SetLimitGroups(tb.ctx, tb.slug, []queues.LimitGroup{{Name: "tags", Regex: `^tag:`, RatePerMinute: 0}})
		require.NoError(t, err)
		require.Equal(t, 4, res.Moved)
		assertPlaces(t, tb, map[string]string{"user:a": "todo", "user:b": "todo", "user:c": "todo:secondary", "tag:x": "todo:secondary:g:tags"})
		require.Equal(t, []string{"user:a", "user:b", "user:c"}, tb.claim(t, "alice", 5))
		checkIndexesAgree(t, tb)

		_, err = tb.engine.SetLimitGroups(tb.ctx, tb.slug, []queues.LimitGroup{{Name: "Bad Name", Type: "x"}})
		requireCode(t, err, queues.CodeInvalid)
		_, err = tb.engine.SetLimitGroups(tb.ctx, tb.slug, []queues.LimitGroup{{Name: "re", Regex: `(`}})
		requireCode(t, err, queues.CodeInvalid)
		_, err = tb.engine.SetLimitGroups(tb.ctx, tb.slug, []queues.LimitGroup{{Name: "two", Type: "a", Glob: "b*"}})
		requireCode(t, err, queues.CodeInvalid)
	})
}

// TestStaleGroupsOnAnotherFrontendAreRefreshed: two engines (frontends)
// share Redis; one changes the groups, the other's next claim notices.
func TestStaleGroupsOnAnotherFrontendAreRefreshed(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{})
		other := queues.NewEngine(b.Client, queues.Options{Clock: tb.clock, Logger: quietLogger})
		tb.enqueue(t, todo, "user:a", "post:1")
		_, err := other.Claim(tb.ctx, queues.ClaimRequest{Project: tb.slug, Downloader: "alice", Count: 0})
		require.NoError(t, err) // other has cached "no groups"
		_, err = tb.engine.SetLimitGroups(tb.ctx, tb.slug, []queues.LimitGroup{{Name: "posts", Type: "post", RatePerMinute: 0}})
		require.NoError(t, err)
		res, err := other.Claim(tb.ctx, queues.ClaimRequest{Project: tb.slug, Downloader: "alice", Count: 5})
		require.Error(t, err, "got %v", res)
		requireCode(t, err, queues.CodeNoItem)
		_, err = other.Enqueue(tb.ctx, tb.slug, todo, []queues.QueueItem{{Name: "post:2"}})
		require.NoError(t, err)
		assertPlaces(t, tb, map[string]string{"post:1": "todo:g:posts", "post:2": "todo:g:posts"})
	})
}

func TestMoveByPatternAndCount(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{})
		tb.enqueue(t, todo, "a:1", "b:1", "a:2", "b:2", "a:3")
		res, err := tb.engine.Move(tb.ctx, tb.slug, queues.MoveRequest{From: "todo", To: "secondary", Match: &queues.LimitGroup{Glob: "a:*"}, Count: 2})
		require.NoError(t, err)
		require.Equal(t, 2, res.Moved)
		assertPlaces(t, tb, map[string]string{"a:1": "todo:secondary", "a:2": "todo:secondary", "a:3": "todo", "b:1": "todo"})
		res, err = tb.engine.Move(tb.ctx, tb.slug, queues.MoveRequest{From: "todo", To: "redo"})
		require.NoError(t, err)
		require.Equal(t, 3, res.Moved)
		require.Equal(t, queues.Counts{Secondary: 2, Redo: 3}, tb.counts(t))
		_, err = tb.engine.Move(tb.ctx, tb.slug, queues.MoveRequest{From: "todo", To: "nowhere"})
		requireCode(t, err, queues.CodeInvalid)
		_, err = tb.engine.Move(tb.ctx, tb.slug, queues.MoveRequest{From: "todo", To: "secondary", Match: &queues.LimitGroup{Regex: "("}})
		requireCode(t, err, queues.CodeInvalid)
		require.Equal(t, queues.Counts{Secondary: 2, Redo: 3}, tb.counts(t))
	})
}

func TestGlobalBlocks(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{})
		_, err := tb.engine.CreateProject(tb.ctx, "lenient", queues.SettingsPatch{IgnoreGlobalBlocks: ptr(true)})
		require.NoError(t, err)
		tb.enqueue(t, todo, "a", "b")
		_, err = tb.engine.Enqueue(tb.ctx, "lenient", todo, []queues.QueueItem{{Name: "x"}})
		require.NoError(t, err)
		require.NoError(t, tb.engine.BlockGlobally(tb.ctx, "mallory", queues.BlockEntry{Reason: "uploads junk everywhere", By: "op"}))
		err = tb.claimErr("mallory", 1)
		requireCode(t, err, queues.CodeBlocked)
		require.Contains(t, err.Error(), "uploads junk everywhere")
		_, err = tb.engine.Claim(tb.ctx, queues.ClaimRequest{Project: "lenient", Downloader: "mallory", Count: 1})
		require.NoError(t, err)
		blocks, err := tb.engine.Blocks(tb.ctx, "")
		require.NoError(t, err)
		require.Equal(t, "op", blocks["mallory"].By)
		require.False(t, blocks["mallory"].At.IsZero())
		found, err := tb.engine.UnblockGlobally(tb.ctx, "mallory")
		require.NoError(t, err)
		require.True(t, found)
		require.Equal(t, []string{"a"}, tb.claim(t, "mallory", 1))
	})
}

func TestGlobsMatchAcrossSlashes(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{})
		_, err := tb.engine.SetLimitGroups(tb.ctx, tb.slug, []queues.LimitGroup{
			{Name: "huge", Glob: "url:https://huge.example/*", RatePerMinute: 0},
			{Name: "img", Glob: "*.[jp][pn]g", RatePerMinute: 0},
		})
		require.NoError(t, err)
		tb.enqueue(t, todo, "url:https://huge.example/a/b/c", "url:https://huge.example.org/x", "x/y.png", "x/y.gif", "url:https://HUGE.example/a")
		assertPlaces(t, tb, map[string]string{
			"url:https://huge.example/a/b/c": "todo:g:huge", "url:https://huge.example.org/x": "todo",
			"x/y.png": "todo:g:img", "x/y.gif": "todo", "url:https://HUGE.example/a": "todo",
		})
		_, err = tb.engine.SetLimitGroups(tb.ctx, tb.slug, []queues.LimitGroup{{Name: "bad", Glob: "a[b", RatePerMinute: 0}})
		requireCode(t, err, queues.CodeInvalid)
	})
}

// TestRemovedLimitGroupLeavesNoSubQueue: removing a limit group moves its
// items back to the shared queues, and its sub-queues and its name in the
// known groups go (issue 13's list of records: nothing of a removed group
// is left behind).
func TestRemovedLimitGroupLeavesNoSubQueue(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{})
		_, err := tb.engine.SetLimitGroups(tb.ctx, tb.slug, []queues.LimitGroup{{Name: "users", Type: "user", RatePerMinute: 0}})
		require.NoError(t, err)
		tb.enqueue(t, todo, "user:a", "user:b")
		tb.enqueue(t, queues.Target{Queue: queues.QueueSecondary}, "user:c")
		require.Equal(t, int64(2), tb.rdb.ZCard(tb.ctx, queues.GroupQueueKey(tb.slug, queues.QueueTodo, "users")).Val()+
			tb.rdb.LLen(tb.ctx, queues.GroupQueueKey(tb.slug, queues.QueueTodo, "users")).Val())
		require.Contains(t, tb.rdb.SMembers(tb.ctx, queues.GroupsKnownKey(tb.slug)).Val(), "users")

		res, err := tb.engine.SetLimitGroups(tb.ctx, tb.slug, nil)
		require.NoError(t, err)
		require.Equal(t, 3, res.Moved)
		for _, q := range queues.SharedQueues {
			require.Zero(t, tb.rdb.Exists(tb.ctx, queues.GroupQueueKey(tb.slug, q, "users")).Val(), "sub-queue of %s", q)
		}
		require.NotContains(t, tb.rdb.SMembers(tb.ctx, queues.GroupsKnownKey(tb.slug)).Val(), "users")
		assertPlaces(t, tb, map[string]string{"user:a": "todo", "user:b": "todo", "user:c": "todo:secondary"})
		require.Equal(t, []string{"user:a", "user:b", "user:c"}, tb.claim(t, "alice", 5))
	})
}
