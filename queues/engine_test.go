package queues_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/queues"
)

type bundle struct {
	ctx    context.Context
	engine *queues.Engine
	clock  *queues.FakeClock
	rdb    redis.UniversalClient
	slug   string
}

func setup(t *testing.T, b redistest.Backend, patch queues.SettingsPatch) bundle {
	t.Helper()
	return setupProject(t, b, "proj", patch)
}

func setupProject(t *testing.T, b redistest.Backend, slug string, patch queues.SettingsPatch) bundle {
	t.Helper()
	ctx := context.Background()
	clock := queues.NewFakeClock(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
	engine := queues.NewEngine(b.Client, queues.Options{Clock: clock, Logger: quietLogger})
	_, err := engine.CreateProject(ctx, slug, patch)
	require.NoError(t, err)
	return bundle{ctx: ctx, engine: engine, clock: clock, rdb: b.Client, slug: slug}
}

func (tb bundle) enqueue(t *testing.T, target queues.Target, names ...string) {
	t.Helper()
	tb.enqueueResult(t, target, names...)
}

func (tb bundle) enqueueResult(t *testing.T, target queues.Target, names ...string) queues.EnqueueResult {
	t.Helper()
	items := make([]queues.QueueItem, len(names))
	for i, n := range names {
		items[i] = queues.QueueItem{Name: n}
	}
	res, err := tb.engine.Enqueue(tb.ctx, tb.slug, target, items)
	require.NoError(t, err)
	return res
}

func (tb bundle) claim(t *testing.T, downloader string, n int) []string {
	t.Helper()
	res, err := tb.engine.Claim(tb.ctx, queues.ClaimRequest{Project: tb.slug, Downloader: downloader, IP: "127.0.0.1", Count: n})
	require.NoError(t, err)
	names := make([]string, len(res.Items))
	for i, it := range res.Items {
		names[i] = it.Name
	}
	return names
}

func (tb bundle) claimErr(downloader string, n int) error {
	_, err := tb.engine.Claim(tb.ctx, queues.ClaimRequest{Project: tb.slug, Downloader: downloader, IP: "127.0.0.1", Count: n})
	return err
}

func (tb bundle) done(downloader string, items ...string) (queues.DoneResult, error) {
	return tb.engine.Done(tb.ctx, queues.DoneRequest{Project: tb.slug, Downloader: downloader, Items: items,
		Bytes: map[string]int64{"data": 100}})
}

func (tb bundle) counts(t *testing.T) queues.Counts {
	t.Helper()
	c, err := tb.engine.Counts(tb.ctx, tb.slug)
	require.NoError(t, err)
	return c
}

func requireCode(t *testing.T, err error, code queues.Code) {
	t.Helper()
	require.Error(t, err)
	require.Equal(t, code, queues.CodeOf(err), "error: %v", err)
}

func ptr[T any](v T) *T { return &v }

var todo = queues.Target{Queue: queues.QueueTodo}

var quietLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

func TestClaimAndDone(t *testing.T) {
	forEachMode(t, queues.SettingsPatch{}, func(t *testing.T, tb bundle, mode string) {
		tb.enqueue(t, todo, "a", "b", "c")
		require.Equal(t, []string{"a"}, tb.claim(t, "alice", 1))
		require.Equal(t, queues.Counts{Todo: 2, Out: 1}, tb.counts(t))

		res, err := tb.done("alice", "a")
		require.NoError(t, err)
		require.Equal(t, queues.DoneResult{New: 1}, res)
		// A repeated done is accepted and counted once.
		res, err = tb.done("alice", "a")
		require.NoError(t, err)
		require.Equal(t, queues.DoneResult{Duplicates: 1}, res)
		require.Equal(t, queues.Counts{Todo: 2, Done: 1}, tb.counts(t))

		stats, err := tb.engine.Stats(tb.ctx, tb.slug)
		require.NoError(t, err)
		require.EqualValues(t, 1, stats.Counters["items_done"])
		require.EqualValues(t, 100, stats.Counters["bytes_done"])
		require.Equal(t, []queues.DownloaderStats{{Name: "alice", Bytes: 100, Items: 1}}, stats.Downloaders)
		require.EqualValues(t, 100, stats.DomainBytes["data"])
		require.Equal(t, 1.0, stats.IRSR)
		require.Len(t, stats.Hourly, 24)
		require.Equal(t, queues.HourStats{Hour: tb.clock.Now().Truncate(time.Hour), ItemsDone: 1, BytesDone: 100, Requests: 1, RequestsServed: 1}, stats.Hourly[23])
		require.Equal(t, queues.WindowStats{Requests: 1, IRSR: 1, ItemsDone: 1, BytesDone: 100}, stats.LastHour)
		ttl, err := tb.rdb.TTL(tb.ctx, queues.HourlyKey(tb.slug, tb.clock.Now())).Result()
		require.NoError(t, err)
		require.InDelta(t, queues.HourlyRetention.Seconds(), ttl.Seconds(), 5, "hourly history expires")

		recent, err := tb.engine.Recent(tb.ctx, tb.slug, 10)
		require.NoError(t, err)
		require.Len(t, recent, 1)
		require.Contains(t, string(recent[0]), `"items":["a"]`)
		require.Contains(t, string(recent[0]), `"by":"alice"`)
	})
}

func TestQueuePriorityOrder(t *testing.T) {
	forEachMode(t, queues.SettingsPatch{ReclaimEnabled: ptr(true), ReclaimTTL: ptr(queues.Duration(time.Hour))}, func(t *testing.T, tb bundle, mode string) {
		tb.enqueue(t, todo, "stale")
		require.Equal(t, []string{"stale"}, tb.claim(t, "bob", 1))
		tb.clock.Advance(2 * time.Hour) // "stale" is now due for a reclaim

		tb.enqueue(t, queues.Target{Queue: queues.QueueRedo}, "redo1")
		tb.enqueue(t, queues.Target{Queue: queues.QueueSecondary}, "sec1")
		tb.enqueue(t, queues.Target{Queue: queues.QueueBackfeed}, "bf1")
		tb.enqueue(t, todo, "todo1")
		tb.enqueue(t, queues.Target{Downloader: "alice"}, "mine1")

		var order []string
		for range 6 {
			order = append(order, tb.claim(t, "alice", 1)...)
		}
		require.Equal(t, []string{"mine1", "todo1", "bf1", "sec1", "redo1", "stale"}, order)
		// Another downloader never sees alice's reserved queue.
		tb.enqueue(t, queues.Target{Downloader: "alice"}, "mine2")
		requireCode(t, tb.claimErr("carol", 1), queues.CodeNoItem)
		require.EqualValues(t, 1, tb.counts(t).Reserved)

		// One request can span queues.
		tb.enqueue(t, todo, "t1")
		tb.enqueue(t, queues.Target{Queue: queues.QueueSecondary}, "s1", "s2")
		require.Equal(t, []string{"t1", "s1", "s2"}, tb.claim(t, "carol", 5))
	})
}

func TestMultiClaimThenPartialDone(t *testing.T) {
	forEachMode(t, queues.SettingsPatch{}, func(t *testing.T, tb bundle, mode string) {
		tb.enqueue(t, todo, "i1", "i2", "i3", "i4", "i5")
		got := tb.claim(t, "alice", 100)
		require.Equal(t, []string{"i1", "i2", "i3", "i4", "i5"}, got)
		// Seesaw reports only the items that succeeded; the aborted ones
		// stay out.
		res, err := tb.done("alice", "i1", "i3", "i5")
		require.NoError(t, err)
		require.Equal(t, 3, res.New)
		require.Equal(t, queues.Counts{Out: 2, Done: 3}, tb.counts(t))
		assertPlaces(t, tb, map[string]string{"i1": "done", "i2": "out", "i3": "done", "i4": "out", "i5": "done"})
	})
}

func TestDoneForItemNeverHandedOutChangesNothing(t *testing.T) {
	forEachMode(t, queues.SettingsPatch{}, func(t *testing.T, tb bundle, mode string) {
		tb.enqueue(t, todo, "queued", "claimed")
		require.Equal(t, []string{"queued"}, tb.claim(t, "alice", 1))
		before := dumpProject(t, tb)

		if mode != queues.DoneKeep {
			// Count and archive keep only the recent completions, so an
			// unknown item is taken for one done long ago: accepted as a
			// repeat that changes nothing but the counter of such dones.
			// A still-queued item stays queued.
			res, err := tb.done("alice", "never-seen", "claimed")
			require.NoError(t, err)
			require.Equal(t, queues.DoneResult{Duplicates: 2}, res)
			after := dumpProject(t, tb)
			delete(before, queues.StatsKey(tb.slug))
			delete(after, queues.StatsKey(tb.slug))
			require.Equal(t, before, after)
			require.Equal(t, []string{"claimed"}, tb.claim(t, "bobby", 5), "still queued, still served")
			return
		}
		_, err := tb.done("alice", "never-seen")
		requireCode(t, err, queues.CodeNotHandedOut)
		// Mixed with a valid item, the whole done is refused.
		_, err = tb.done("alice", "queued", "claimed")
		requireCode(t, err, queues.CodeNotHandedOut)
		var qe *queues.Error
		require.True(t, errors.As(err, &qe))
		require.Equal(t, []string{"claimed"}, qe.Items)

		after := dumpProject(t, tb)
		delete(before, queues.StatsKey(tb.slug))
		delete(after, queues.StatsKey(tb.slug))
		require.Equal(t, before, after)
	})
}

func TestLateDoneAfterReclaimCompletesOnce(t *testing.T) {
	// A budget limit, so the budget hash is kept and its return to empty
	// means something.
	forEachMode(t, queues.SettingsPatch{ReclaimEnabled: ptr(true), ReclaimTTL: ptr(queues.Duration(time.Hour)), DownloaderBudget: ptr(50)}, func(t *testing.T, tb bundle, mode string) {
		tb.enqueue(t, todo, "x")
		require.Equal(t, []string{"x"}, tb.claim(t, "alice", 1))
		tb.clock.Advance(61 * time.Minute)
		require.Equal(t, []string{"x"}, tb.claim(t, "bob", 1), "reclaimed for bob")
		require.Equal(t, queues.Counts{Out: 1}, tb.counts(t), "a reclaim changes no counts")

		res, err := tb.done("alice", "x") // alice was slow, not dead
		require.NoError(t, err)
		require.Equal(t, 1, res.New)
		res, err = tb.done("bob", "x")
		require.NoError(t, err)
		require.Equal(t, queues.DoneResult{Duplicates: 1}, res)

		stats, err := tb.engine.Stats(tb.ctx, tb.slug)
		require.NoError(t, err)
		require.EqualValues(t, 1, stats.Counters["items_done"])
		require.EqualValues(t, 1, stats.Counters["items_reclaimed"])
		require.Equal(t, queues.Counts{Done: 1}, stats.Counts)
		budget, err := tb.rdb.HGetAll(tb.ctx, queues.BudgetKey(tb.slug)).Result()
		require.NoError(t, err)
		require.Empty(t, budget, "nobody holds a claim any more")
	})
}

// TestReclaimIsOnForANewProject: a new project reclaims after 6 hours, so a
// claim lost in a crash comes back by itself; the oldest claim's age shows
// in the counts either way.
func TestReclaimIsOnForANewProject(t *testing.T) {
	forEachMode(t, queues.SettingsPatch{}, func(t *testing.T, tb bundle, mode string) {
		settings, err := tb.engine.Project(tb.ctx, tb.slug)
		require.NoError(t, err)
		require.True(t, settings.ReclaimEnabled)
		require.Equal(t, queues.Duration(6*time.Hour), settings.ReclaimTTL)

		tb.enqueue(t, todo, "x", "y")
		require.Zero(t, tb.counts(t).OldestClaimAgeSeconds, "no claim, no age")
		tb.claim(t, "alice", 1)
		tb.clock.Advance(90 * time.Minute)
		tb.claim(t, "carol", 1)
		tb.clock.Advance(30 * time.Minute)
		c := tb.counts(t)
		require.Equal(t, 7200.0, c.OldestClaimAgeSeconds, "the oldest claim, not the newest")
		requireCode(t, tb.claimErr("bob", 1), queues.CodeNoItem)

		tb.clock.Advance(4 * time.Hour)
		require.EqualValues(t, 1, tb.counts(t).Reclaimable)
		require.Equal(t, []string{"x"}, tb.claim(t, "bob", 1), "reclaimed after 6 hours")

		// An operator can still turn it off.
		_, err = tb.engine.UpdateProject(tb.ctx, tb.slug, queues.SettingsPatch{ReclaimEnabled: ptr(false)})
		require.NoError(t, err)
		tb.clock.Advance(1000 * time.Hour)
		requireCode(t, tb.claimErr("dave", 1), queues.CodeNoItem)
	})
}

func TestReclaimDeadlineGrowsWithTimesClaimed(t *testing.T) {
	forEachMode(t, queues.SettingsPatch{ReclaimEnabled: ptr(true), ReclaimTTL: ptr(queues.Duration(time.Hour))}, func(t *testing.T, tb bundle, mode string) {
		tb.enqueue(t, todo, "x")
		tb.claim(t, "alice", 1) // claimed once: due after 1h
		tb.clock.Advance(59 * time.Minute)
		requireCode(t, tb.claimErr("bob", 1), queues.CodeNoItem)
		tb.clock.Advance(time.Minute)
		require.Equal(t, []string{"x"}, tb.claim(t, "bob", 1)) // claimed twice: due after 2h
		tb.clock.Advance(119 * time.Minute)
		requireCode(t, tb.claimErr("carol", 1), queues.CodeNoItem)
		tb.clock.Advance(time.Minute)
		require.Equal(t, []string{"x"}, tb.claim(t, "carol", 1)) // three times: 3h
		tb.clock.Advance(179 * time.Minute)
		requireCode(t, tb.claimErr("dave", 1), queues.CodeNoItem)
		tb.clock.Advance(time.Minute)
		require.Equal(t, []string{"x"}, tb.claim(t, "dave", 1))

		record, err := tb.rdb.HGet(tb.ctx, queues.ClaimsKey(tb.slug), "x").Result()
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(record, "4 "), record)
		require.Contains(t, record, " dave 127.0.0.1")
	})
}

func TestClaimsLimitServesReclaimsFirst(t *testing.T) {
	forEachMode(t, queues.SettingsPatch{ClaimsLimit: ptr(2)}, func(t *testing.T, tb bundle, mode string) {
		tb.enqueue(t, todo, "a", "b", "c", "d")
		require.Equal(t, []string{"a"}, tb.claim(t, "alice", 1))
		require.Equal(t, []string{"b"}, tb.claim(t, "bob", 5), "capped by the room left under the limit")
		err := tb.claimErr("carol", 1)
		requireCode(t, err, queues.CodeNoItem)
		require.Contains(t, err.Error(), "claims limit")

		_, err = tb.engine.UpdateProject(tb.ctx, tb.slug, queues.SettingsPatch{ReclaimEnabled: ptr(true), ReclaimTTL: ptr(queues.Duration(time.Hour))})
		require.NoError(t, err)
		tb.clock.Advance(2 * time.Hour)
		// At the limit, reclaims come before todo even though todo has items.
		require.Equal(t, []string{"a", "b"}, tb.claim(t, "carol", 5))
		require.Equal(t, queues.Counts{Todo: 2, Out: 2}, tb.counts(t))
	})
}

func TestDownloaderBudget(t *testing.T) {
	forEachMode(t, queues.SettingsPatch{DownloaderBudget: ptr(2)}, func(t *testing.T, tb bundle, mode string) {
		tb.enqueue(t, todo, "a", "b", "c", "d", "e")
		require.Equal(t, []string{"a", "b"}, tb.claim(t, "alice", 10))
		err := tb.claimErr("alice", 1)
		requireCode(t, err, queues.CodeNoItem)
		require.Contains(t, err.Error(), "budget")
		require.Equal(t, []string{"c"}, tb.claim(t, "bob", 1))
		_, err = tb.done("alice", "a")
		require.NoError(t, err)
		require.Equal(t, []string{"d"}, tb.claim(t, "alice", 10))
	})
}

// TestBudgetKeptOnlyWhileALimitIsSet: without a budget limit no claim or
// done writes the budget hash; setting a limit rebuilds it from the claims
// already out (so the limit holds at once), the scripts keep it from then
// on, and removing the limit drops it.
func TestBudgetKeptOnlyWhileALimitIsSet(t *testing.T) {
	forEachMode(t, queues.SettingsPatch{}, func(t *testing.T, tb bundle, mode string) {
		budget := func() map[string]string {
			t.Helper()
			b, err := tb.rdb.HGetAll(tb.ctx, queues.BudgetKey(tb.slug)).Result()
			require.NoError(t, err)
			return b
		}
		tb.enqueue(t, todo, "a", "b", "c", "d", "e", "f", "g")
		require.Equal(t, []string{"a", "b", "c"}, tb.claim(t, "alice", 3))
		require.Equal(t, []string{"d"}, tb.claim(t, "bob", 1))
		_, err := tb.done("alice", "a")
		require.NoError(t, err)
		require.Empty(t, budget(), "no limit: no budget written")

		_, err = tb.engine.UpdateProject(tb.ctx, tb.slug, queues.SettingsPatch{DownloaderBudget: ptr(2)})
		require.NoError(t, err)
		require.Equal(t, map[string]string{"alice": "2", "bob": "1"}, budget(), "rebuilt from the claims out")
		err = tb.claimErr("alice", 1)
		requireCode(t, err, queues.CodeNoItem)
		require.Contains(t, err.Error(), "budget", "alice already holds 2")
		require.Equal(t, []string{"e"}, tb.claim(t, "bob", 5), "bob has room for one")
		checkIndexesAgree(t, tb)

		// Another change that leaves the limit on keeps the counts.
		_, err = tb.engine.UpdateProject(tb.ctx, tb.slug, queues.SettingsPatch{DownloaderBudget: ptr(3)})
		require.NoError(t, err)
		require.Equal(t, map[string]string{"alice": "2", "bob": "2"}, budget())
		_, err = tb.done("alice", "b", "c")
		require.NoError(t, err)
		require.Equal(t, map[string]string{"bob": "2"}, budget(), "a field reaching zero goes")

		_, err = tb.engine.UpdateProject(tb.ctx, tb.slug, queues.SettingsPatch{DownloaderBudget: ptr(0)})
		require.NoError(t, err)
		require.Empty(t, budget(), "the limit went, the budget with it")
		require.Equal(t, []string{"f", "g"}, tb.claim(t, "bob", 5))
		require.Empty(t, budget())
		checkIndexesAgree(t, tb)
	})
}
func TestVersionGateComparesVersions(t *testing.T) {
	forEachMode(t, queues.SettingsPatch{MinVersion: ptr("20240101.10")}, func(t *testing.T, tb bundle, mode string) {
		names := make([]string, 20)
		for i := range names {
			names[i] = fmt.Sprintf("i%d", i)
		}
		tb.enqueue(t, todo, names...)
		for _, tc := range []struct {
			version string
			ok      bool
		}{
			{"", false},
			{"20240101.9", false}, // a string comparison would let this through
			{"20240101.09", false},
			{"20231231.99", false},
			{"20240101.10", true},
			{"20240101.010", true},
			{"20240101.10.1", true},
			{"20240101.11", true},
			{"20240102", true},
			{"120240101", true},
		} {
			_, err := tb.engine.Claim(tb.ctx, queues.ClaimRequest{Project: tb.slug, Downloader: "alice", Version: tc.version, Count: 1})
			if tc.ok {
				require.NoError(t, err, tc.version)
			} else {
				requireCode(t, err, queues.CodeVersionTooOld)
			}
		}
	})
}

func TestBlocked(t *testing.T) {
	forEachMode(t, queues.SettingsPatch{}, func(t *testing.T, tb bundle, mode string) {
		tb.enqueue(t, todo, "a", "b")
		require.NoError(t, tb.engine.Block(tb.ctx, tb.slug, "mallory", queues.BlockEntry{Reason: "bad uploads", By: "op"}))
		err := tb.claimErr("mallory", 1)
		requireCode(t, err, queues.CodeBlocked)
		require.Contains(t, err.Error(), "bad uploads")
		require.NoError(t, tb.engine.Block(tb.ctx, tb.slug, "127.0.0.1", queues.BlockEntry{Reason: "abuse"}))
		requireCode(t, tb.claimErr("alice", 1), queues.CodeBlocked)
		_, err = tb.engine.Unblock(tb.ctx, tb.slug, "127.0.0.1")
		require.NoError(t, err)
		require.Equal(t, []string{"a"}, tb.claim(t, "alice", 1))
		require.EqualValues(t, 1, tb.counts(t).Todo, "a blocked request took nothing")
	})
}

// TestBlocksIgnoreCase: a block can't be dodged by changing a nickname's
// case, in a project or globally, and an unblock in any case lifts it.
func TestBlocksIgnoreCase(t *testing.T) {
	forEachMode(t, queues.SettingsPatch{}, func(t *testing.T, tb bundle, mode string) {
		tb.enqueue(t, todo, "a", "b")
		require.NoError(t, tb.engine.Block(tb.ctx, tb.slug, "Mallory", queues.BlockEntry{Reason: "bad uploads"}))
		for _, nick := range []string{"mallory", "MALLORY", "Mallory", "mAlLoRy"} {
			requireCode(t, tb.claimErr(nick, 1), queues.CodeBlocked)
		}
		removed, err := tb.engine.Unblock(tb.ctx, tb.slug, "MALLORY")
		require.NoError(t, err)
		require.True(t, removed)
		require.Equal(t, []string{"a"}, tb.claim(t, "mallory", 1))

		require.NoError(t, tb.engine.BlockGlobally(tb.ctx, "EVE", queues.BlockEntry{Reason: "spam"}))
		t.Cleanup(func() { _, _ = tb.engine.UnblockGlobally(tb.ctx, "eve") })
		requireCode(t, tb.claimErr("eve", 1), queues.CodeBlocked)
		removed, err = tb.engine.UnblockGlobally(tb.ctx, "Eve")
		require.NoError(t, err)
		require.True(t, removed)
		require.Equal(t, []string{"b"}, tb.claim(t, "eve", 1))
	})
}

func TestRateLimitIsSmooth(t *testing.T) {
	forEachMode(t, queues.SettingsPatch{RatePerMinute: ptr(60.0), RateBurst: ptr(2)}, func(t *testing.T, tb bundle, mode string) {
		names := make([]string, 10)
		for i := range names {
			names[i] = fmt.Sprintf("i%d", i)
		}
		tb.enqueue(t, todo, names...)
		tb.claim(t, "alice", 1)
		tb.claim(t, "alice", 1) // the burst of two
		err := tb.claimErr("alice", 1)
		requireCode(t, err, queues.CodeRateLimited)
		var qe *queues.Error
		require.True(t, errors.As(err, &qe))
		require.Equal(t, time.Second, qe.RetryAfter)
		tb.clock.Advance(999 * time.Millisecond)
		requireCode(t, tb.claimErr("alice", 1), queues.CodeRateLimited)
		tb.clock.Advance(time.Millisecond)
		tb.claim(t, "alice", 1)
		requireCode(t, tb.claimErr("alice", 1), queues.CodeRateLimited)
		require.EqualValues(t, 7, tb.counts(t).Todo)
	})
}

func TestPausedProjectServesNothing(t *testing.T) {
	forEachMode(t, queues.SettingsPatch{Paused: ptr(true)}, func(t *testing.T, tb bundle, mode string) {
		tb.enqueue(t, todo, "a")
		err := tb.claimErr("alice", 1)
		requireCode(t, err, queues.CodeNoItem)
		require.Contains(t, err.Error(), "paused")
	})
}

func TestReleaseClaims(t *testing.T) {
	forEachMode(t, queues.SettingsPatch{}, func(t *testing.T, tb bundle, mode string) {
		tb.enqueue(t, todo, "old-a", "old-b", "new-a", "new-b")
		tb.claim(t, "alice", 1)
		tb.claim(t, "bobby", 1)
		tb.clock.Advance(7 * time.Hour)
		tb.claim(t, "alice", 1)
		tb.claim(t, "bobby", 1)

		res, err := tb.engine.ReleaseClaims(tb.ctx, tb.slug, queues.ReleaseFilter{OlderThan: 6 * time.Hour, Downloader: "alice"})
		require.NoError(t, err)
		require.Equal(t, 1, res.Released)
		assertPlaces(t, tb, map[string]string{"old-a": "todo:redo", "old-b": "out", "new-a": "out", "new-b": "out"})

		res, err = tb.engine.ReleaseClaims(tb.ctx, tb.slug, queues.ReleaseFilter{Downloader: "bobby"})
		require.NoError(t, err)
		require.Equal(t, 2, res.Released)
		res, err = tb.engine.ReleaseClaims(tb.ctx, tb.slug, queues.ReleaseFilter{})
		require.NoError(t, err)
		require.Equal(t, 1, res.Released)
		require.Equal(t, queues.Counts{Redo: 4}, tb.counts(t))
		// Released items are served again.
		require.Len(t, tb.claim(t, "carol", 10), 4)
	})
}

func TestWarriorReleaseOnlyOwnClaims(t *testing.T) {
	forEachMode(t, queues.SettingsPatch{}, func(t *testing.T, tb bundle, mode string) {
		tb.enqueue(t, todo, "a", "b")
		tb.claim(t, "alice", 1)
		res, err := tb.engine.Release(tb.ctx, tb.slug, []string{"a"}, "bobby")
		require.NoError(t, err)
		require.Equal(t, queues.ReleaseResult{Filtered: 1}, res)
		res, err = tb.engine.Release(tb.ctx, tb.slug, []string{"a", "b"}, "alice")
		require.NoError(t, err)
		require.Equal(t, queues.ReleaseResult{Released: 1, NotOut: 1}, res)
		require.Equal(t, queues.Counts{Todo: 1, Redo: 1}, tb.counts(t))
	})
}

func TestDuplicateQueuedItemIsDropped(t *testing.T) {
	forEachMode(t, queues.SettingsPatch{}, func(t *testing.T, tb bundle, mode string) {
		tb.enqueue(t, todo, "a", "a", "b")
		require.Equal(t, []string{"a"}, tb.claim(t, "alice", 1))
		require.Equal(t, []string{"b"}, tb.claim(t, "bobby", 1), "the second copy of a is not handed out")
		_, err := tb.done("alice", "a")
		require.NoError(t, err)
		tb.enqueue(t, todo, "a", "c")
		require.Equal(t, []string{"c"}, tb.claim(t, "bobby", 1), "a done item is not handed out again")
	})
}

func TestItemExtras(t *testing.T) {
	forEachMode(t, queues.SettingsPatch{}, func(t *testing.T, tb bundle, mode string) {
		_, err := tb.engine.Enqueue(tb.ctx, tb.slug, todo, []queues.QueueItem{
			{Name: "a", Extras: []byte(`{"depth": 2}`)}, {Name: "b"},
		})
		require.NoError(t, err)
		res, err := tb.engine.Claim(tb.ctx, queues.ClaimRequest{Project: tb.slug, Downloader: "alice", Count: 2})
		require.NoError(t, err)
		require.Equal(t, `{"depth":2}`, string(res.Items[0].Extras))
		require.Nil(t, res.Items[1].Extras)

		_, err = tb.engine.Enqueue(tb.ctx, tb.slug, todo, []queues.QueueItem{{Name: "c", Extras: []byte(`[1]`)}})
		requireCode(t, err, queues.CodeInvalid)
	})
}

// has_extras is set where extras are written, so claim.lua and done.lua
// ask Redis nothing about extras on a project without them; a project from
// before the flag (no has_extras field) still has its extras served and
// removed, by probing the key.
func TestItemExtrasFlagSetWhereWritten(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		for _, before := range []bool{false, true} {
			t.Run(fmt.Sprintf("project from before the flag %v", before), func(t *testing.T) {
				tb := setupProject(t, b, fmt.Sprintf("extras-flag-%v", before), queues.SettingsPatch{})
				flag := func() string {
					v, err := tb.rdb.HGet(tb.ctx, queues.ConfigKey(tb.slug), "has_extras").Result()
					if errors.Is(err, redis.Nil) {
						return "<none>"
					}
					require.NoError(t, err)
					return v
				}
				require.Equal(t, "0", flag(), "a new project has no extras")
				tb.enqueue(t, todo, "plain")
				require.Equal(t, "0", flag(), "items without extras leave it")
				_, err := tb.engine.Enqueue(tb.ctx, tb.slug, todo, []queues.QueueItem{{Name: "rich", Extras: []byte(`{"depth":2}`)}})
				require.NoError(t, err)
				require.Equal(t, "1", flag())
				if before {
					require.NoError(t, tb.rdb.HDel(tb.ctx, queues.ConfigKey(tb.slug), "has_extras").Err())
				}
				res, err := tb.engine.Claim(tb.ctx, queues.ClaimRequest{Project: tb.slug, Downloader: "alice", IP: "127.0.0.1", Count: 2})
				require.NoError(t, err)
				require.Len(t, res.Items, 2)
				require.Equal(t, "plain", res.Items[0].Name)
				require.Nil(t, res.Items[0].Extras)
				require.Equal(t, `{"depth":2}`, string(res.Items[1].Extras))
				_, err = tb.engine.Done(tb.ctx, queues.DoneRequest{Project: tb.slug, Downloader: "alice", Items: []string{"plain", "rich"}})
				require.NoError(t, err)
				left, err := tb.rdb.Exists(tb.ctx, queues.ExtrasKey(tb.slug)).Result()
				require.NoError(t, err)
				require.Zero(t, left, "done removes a completed item's extras")
			})
		}
	})
}

// The recent-completions log is pushed by the frontend, batched: its own
// Recent sees a done at once, another frontend once it has pushed (within
// PublishInterval), newest first, trimmed to log_length; log_length 0
// keeps none.
func TestRecentLogPushedByTheFrontend(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setupProject(t, b, "recent-log", queues.SettingsPatch{LogLength: ptr(3)})
		other := queues.NewEngine(b.Client, queues.Options{Clock: tb.clock, Logger: quietLogger})
		names := []string{"i1", "i2", "i3", "i4", "i5"}
		tb.enqueue(t, todo, names...)
		require.Equal(t, names, tb.claim(t, "alice", 5))
		for _, item := range names {
			_, err := tb.engine.Done(tb.ctx, queues.DoneRequest{Project: tb.slug, Downloader: "alice", Items: []string{item}})
			require.NoError(t, err)
		}
		seen, err := other.Recent(tb.ctx, tb.slug, 10)
		require.NoError(t, err)
		require.Empty(t, seen, "another frontend sees the entries only once this one pushes them")

		recent, err := tb.engine.Recent(tb.ctx, tb.slug, 10)
		require.NoError(t, err)
		require.Len(t, recent, 3, "trimmed to log_length")
		for i, want := range []string{"i5", "i4", "i3"} {
			require.Contains(t, string(recent[i]), `"items":["`+want+`"]`, "newest first")
		}
		seen, err = other.Recent(tb.ctx, tb.slug, 10)
		require.NoError(t, err)
		require.Equal(t, recent, seen)

		_, err = tb.engine.UpdateProject(tb.ctx, tb.slug, queues.SettingsPatch{LogLength: ptr(0)})
		require.NoError(t, err)
		tb.enqueue(t, todo, "i6")
		require.Equal(t, []string{"i6"}, tb.claim(t, "alice", 1))
		_, err = tb.engine.Done(tb.ctx, queues.DoneRequest{Project: tb.slug, Downloader: "alice", Items: []string{"i6"}})
		require.NoError(t, err)
		recent, err = tb.engine.Recent(tb.ctx, tb.slug, 10)
		require.NoError(t, err)
		require.Len(t, recent, 3, "log_length 0 pushes nothing")
		require.Contains(t, string(recent[0]), `"items":["i5"]`)
	})
}

func TestBadInputChangesNothing(t *testing.T) {
	forEachMode(t, queues.SettingsPatch{}, func(t *testing.T, tb bundle, mode string) {
		before := dumpProject(t, tb)
		_, err := tb.engine.CreateProject(tb.ctx, "bad{slug}", queues.SettingsPatch{})
		requireCode(t, err, queues.CodeInvalid)
		require.Contains(t, err.Error(), "{ or }")
		_, err = tb.engine.CreateProject(tb.ctx, tb.slug, queues.SettingsPatch{})
		requireCode(t, err, queues.CodeExists)
		_, err = tb.engine.Claim(tb.ctx, queues.ClaimRequest{Project: tb.slug, Downloader: "a{b}c"})
		requireCode(t, err, queues.CodeInvalid)
		_, err = tb.engine.Claim(tb.ctx, queues.ClaimRequest{Project: tb.slug, Downloader: "x"})
		requireCode(t, err, queues.CodeInvalid)
		_, err = tb.engine.Claim(tb.ctx, queues.ClaimRequest{Project: "nope", Downloader: "alice"})
		requireCode(t, err, queues.CodeProjectNotFound)
		_, err = tb.engine.Enqueue(tb.ctx, tb.slug, todo, []queues.QueueItem{{Name: "ok"}, {Name: "bad\nitem"}})
		requireCode(t, err, queues.CodeInvalid)
		_, err = tb.engine.Enqueue(tb.ctx, "nope", todo, []queues.QueueItem{{Name: "ok"}})
		requireCode(t, err, queues.CodeProjectNotFound)
		_, err = tb.engine.UpdateProject(tb.ctx, tb.slug, queues.SettingsPatch{UploadTargets: ptr([]string{"ftp://x/"})})
		requireCode(t, err, queues.CodeInvalid)
		_, err = tb.engine.Done(tb.ctx, queues.DoneRequest{Project: tb.slug, Downloader: "alice", Items: []string{"a"}, ID: []byte(`{bad`)})
		requireCode(t, err, queues.CodeInvalid)
		require.Equal(t, before, dumpProject(t, tb))
		_, err = tb.engine.Counts(tb.ctx, "nope")
		requireCode(t, err, queues.CodeProjectNotFound)
	})
}

// TestConcurrentClaimsNeverShareAnItem: many goroutines claim at once; no
// item goes to two warriors (reclaiming is on, but no deadline passes).
func TestConcurrentClaimsNeverShareAnItem(t *testing.T) {
	forEachMode(t, queues.SettingsPatch{ReclaimEnabled: ptr(true)}, func(t *testing.T, tb bundle, mode string) {
		const total = 3000
		names := make([]string, total)
		for i := range names {
			names[i] = fmt.Sprintf("item-%05d", i)
		}
		tb.enqueue(t, todo, names...)

		var mu sync.Mutex
		owner := map[string]string{}
		var wg sync.WaitGroup
		errs := make(chan error, 32)
		for w := range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				downloader := fmt.Sprintf("warrior-%02d", w)
				for {
					res, err := tb.engine.Claim(tb.ctx, queues.ClaimRequest{Project: tb.slug, Downloader: downloader, Count: 1 + w%7})
					if queues.CodeOf(err) == queues.CodeNoItem {
						return
					}
					if err != nil {
						errs <- err
						return
					}
					mu.Lock()
					for _, it := range res.Items {
						if prev, ok := owner[it.Name]; ok {
							errs <- fmt.Errorf("%s went to %s and %s", it.Name, prev, downloader)
						}
						owner[it.Name] = downloader
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.Len(t, owner, total)
		require.Equal(t, queues.Counts{Out: total}, tb.counts(t))
	})
}

// TestRandomizedTransitionsKeepEveryItemInOnePlace drives random requests,
// dones, releases and reclaims, then checks every item is in exactly one
// place and every index agrees with the others.
func TestRandomizedTransitionsKeepEveryItemInOnePlace(t *testing.T) {
	forEachMode(t, queues.SettingsPatch{ReclaimEnabled: ptr(true), ReclaimTTL: ptr(queues.Duration(time.Minute)), ClaimsLimit: ptr(150)}, func(t *testing.T, tb bundle, mode string) {
		rng := rand.New(rand.NewPCG(7, 11))
		all := map[string]bool{}
		next := 0
		addItems := func(n int, target queues.Target) {
			names := make([]string, n)
			for i := range names {
				names[i] = fmt.Sprintf("r%04d", next)
				all[names[i]] = true
				next++
			}
			tb.enqueue(t, target, names...)
		}
		downloaders := []string{"alice", "bobby", "carol", "davey"}
		held := map[string][]string{}
		// Items queued more than once may leave a stale copy in a queue
		// while the item is out or done; the claim script drops it on pop.
		queuedTwice := map[string]bool{}
		for step := range 1500 {
			d := downloaders[rng.IntN(len(downloaders))]
			switch op := rng.IntN(100); {
			case op < 8:
				targets := []queues.Target{todo, {Queue: queues.QueueBackfeed}, {Queue: queues.QueueSecondary}, {Downloader: d}}
				addItems(1+rng.IntN(20), targets[rng.IntN(len(targets))])
			case op < 10 && next > 0:
				again := []string{}
				for range 1 + rng.IntN(5) {
					name := fmt.Sprintf("r%04d", rng.IntN(next))
					again = append(again, name)
					queuedTwice[name] = true
				}
				again = append(again, again[0]) // twice in one batch too
				queuedTwice[again[0]] = true
				tb.enqueue(t, todo, again...)
			case op < 50:
				res, err := tb.engine.Claim(tb.ctx, queues.ClaimRequest{Project: tb.slug, Downloader: d, Count: 1 + rng.IntN(10)})
				if err != nil {
					require.Equal(t, queues.CodeNoItem, queues.CodeOf(err), "step %d: %v", step, err)
					continue
				}
				for _, it := range res.Items {
					held[d] = append(held[d], it.Name)
				}
			case op < 80:
				if len(held[d]) == 0 {
					continue
				}
				k := 1 + rng.IntN(len(held[d]))
				_, err := tb.done(d, held[d][:k]...)
				// Held items may have been released or reclaimed meanwhile;
				// a claimant's done still completes them. Only a claimant
				// pushed off the list of recent claimants is refused.
				if err != nil {
					require.Equal(t, queues.CodeNotClaimant, queues.CodeOf(err), "step %d: %v", step, err)
				}
				held[d] = held[d][k:]
			case op < 85:
				if len(held[d]) > 0 {
					_, err := tb.engine.Release(tb.ctx, tb.slug, held[d][:1], d)
					require.NoError(t, err)
					held[d] = held[d][1:]
				}
			case op < 87:
				_, err := tb.engine.ReleaseClaims(tb.ctx, tb.slug, queues.ReleaseFilter{OlderThan: 3 * time.Minute})
				require.NoError(t, err)
			default:
				tb.clock.Advance(time.Duration(rng.IntN(40)) * time.Second)
			}
		}
		places := placesOf(t, tb)
		for item := range all {
			where := places[item]
			outOrDone := 0
			for _, p := range where {
				if p == "out" || p == "done" {
					outOrDone++
				}
			}
			if queuedTwice[item] {
				require.LessOrEqual(t, outOrDone, 1, "item %s is in %v", item, where)
				require.NotEmpty(t, where, "item %s was lost", item)
			} else {
				require.Len(t, where, 1, "item %s is in %v", item, where)
			}
		}
		require.Len(t, places, len(all))
		checkIndexesAgree(t, tb)
		// Every released record belongs to an item waiting in redo.
		released, err := tb.rdb.HKeys(tb.ctx, queues.ReleasedKey(tb.slug)).Result()
		require.NoError(t, err)
		redo, err := tb.rdb.LRange(tb.ctx, queues.QueueKey(tb.slug, queues.QueueRedo), 0, -1).Result()
		require.NoError(t, err)
		for _, item := range released {
			require.Contains(t, redo, item)
		}
	})
}

// placesOf lists, for every item, each place it sits in.
func placesOf(t *testing.T, tb bundle) map[string][]string {
	t.Helper()
	places := map[string][]string{}
	// A released copy completed since still waits in redo, marked
	// cancelled: the claim that pops it drops it. It is not a place.
	cancelled, err := tb.rdb.HGetAll(tb.ctx, queues.RedoCancelledKey(tb.slug)).Result()
	require.NoError(t, err)
	add := func(place string, items []string) {
		for _, it := range items {
			if cancelled[it] != "" && strings.HasPrefix(place, string(queues.QueueRedo)) {
				continue
			}
			places[it] = append(places[it], place)
		}
	}
	groups, err := tb.rdb.SMembers(tb.ctx, queues.GroupsKnownKey(tb.slug)).Result()
	require.NoError(t, err)
	for _, q := range queues.SharedQueues {
		items, err := tb.rdb.LRange(tb.ctx, queues.QueueKey(tb.slug, q), 0, -1).Result()
		require.NoError(t, err)
		add(string(q), items)
		for _, g := range groups {
			items, err := tb.rdb.LRange(tb.ctx, queues.GroupQueueKey(tb.slug, q, g), 0, -1).Result()
			require.NoError(t, err)
			add(string(q)+":g:"+g, items)
		}
	}
	reserved, err := tb.rdb.SMembers(tb.ctx, queues.ReservedSetKey(tb.slug)).Result()
	require.NoError(t, err)
	for _, d := range reserved {
		items, err := tb.rdb.LRange(tb.ctx, queues.ReservedQueueKey(tb.slug, d), 0, -1).Result()
		require.NoError(t, err)
		add("todo:d:"+d, items)
	}
	add("out", deadlineItems(t, tb))
	done, err := tb.rdb.SMembers(tb.ctx, queues.DoneKey(tb.slug)).Result()
	require.NoError(t, err)
	add("done", done)
	// done_mode count and archive keep the recent completions instead.
	recent, err := tb.rdb.ZRange(tb.ctx, queues.RecentDoneKey(tb.slug), 0, -1).Result()
	require.NoError(t, err)
	add("done", recent)
	return places
}

// deadlineItems is every item with a reclaim deadline: the members of
// deadlines and the items of the claim batches whose records name their
// batch. It checks the batches' bookkeeping on the way: every batch has its
// record and at least one item still in it, its count is how many, and
// "out" is their sum.
func deadlineItems(t *testing.T, tb bundle) []string {
	t.Helper()
	items, err := tb.rdb.ZRange(tb.ctx, queues.DeadlinesKey(tb.slug), 0, -1).Result()
	require.NoError(t, err)
	ids, err := tb.rdb.ZRange(tb.ctx, queues.BatchDeadlinesKey(tb.slug), 0, -1).Result()
	require.NoError(t, err)
	batches, err := tb.rdb.HGetAll(tb.ctx, queues.BatchesKey(tb.slug)).Result()
	require.NoError(t, err)
	claims, err := tb.rdb.HGetAll(tb.ctx, queues.ClaimsKey(tb.slug)).Result()
	require.NoError(t, err)
	total, records := 0, 0
	for field := range batches {
		if strings.HasPrefix(field, "i") {
			records++
		}
	}
	require.Equal(t, len(ids), records, "every batch has a deadline and a record, and only they")
	for _, id := range ids {
		value, ok := batches["i"+id]
		require.True(t, ok, "batch %s has its record", id)
		lines := strings.Split(value, "\n")
		left := 0
		for _, item := range lines[1:] {
			if claims[item] == strings.TrimSuffix(lines[0], "- -")+"#"+id+" -" {
				items = append(items, item)
				left++
			}
		}
		require.NotZero(t, left, "batch %s goes with its last item", id)
		require.Equal(t, fmt.Sprint(left), batches["n"+id], "batch %s counts its items out", id)
		total += left
	}
	if out := batches["out"]; out != "" || total > 0 {
		require.Equal(t, fmt.Sprint(total), out, "out in batches is the sum of their counts")
	}
	return items
}

func assertPlaces(t *testing.T, tb bundle, want map[string]string) {
	t.Helper()
	places := placesOf(t, tb)
	for item, place := range want {
		require.Equal(t, []string{place}, places[item], item)
	}
}

// checkIndexesAgree: deadlines and claims name the same items, no out of a
// previous build is left, and the budget hash counts exactly the claims
// each downloader holds while the project has a budget limit (it is kept
// only then) and is absent otherwise.
func checkIndexesAgree(t *testing.T, tb bundle) {
	t.Helper()
	deadlines := deadlineItems(t, tb)
	require.Zero(t, tb.rdb.Exists(tb.ctx, queues.LegacyOutKey(tb.slug)).Val(), "no out is written")
	claims, err := tb.rdb.HGetAll(tb.ctx, queues.ClaimsKey(tb.slug)).Result()
	require.NoError(t, err)
	sort.Strings(deadlines)
	claimed := make([]string, 0, len(claims))
	perDownloader := map[string]string{}
	counts := map[string]int{}
	for item, record := range claims {
		claimed = append(claimed, item)
		fields := strings.Fields(record)
		require.Len(t, fields, 6, record)
		counts[fields[2]]++
	}
	sort.Strings(claimed)
	require.Equal(t, claimed, deadlines)
	for d, n := range counts {
		perDownloader[d] = fmt.Sprint(n)
	}
	budget, err := tb.rdb.HGetAll(tb.ctx, queues.BudgetKey(tb.slug)).Result()
	require.NoError(t, err)
	project, err := tb.engine.Project(tb.ctx, tb.slug)
	require.NoError(t, err)
	if project.DownloaderBudget > 0 {
		require.Equal(t, perDownloader, budget, "the budget counts each downloader's claims")
	} else {
		require.Empty(t, budget, "no budget limit, no budget kept")
	}
	require.Equal(t, waitingInLists(t, tb), queuedIndex(t, tb), "the queued index is exactly the items waiting in lists")
}

// waitingInLists reads every list queue of the project (shared, reserved,
// limit groups' sub-queues: every list whose name starts with "todo"),
// sorted, one entry per copy.
func waitingInLists(t *testing.T, tb bundle) []string {
	t.Helper()
	prefix := strings.TrimSuffix(queues.QueueKey(tb.slug, queues.QueueTodo), "todo")
	var keys []string
	if cluster, ok := tb.rdb.(*redis.ClusterClient); ok {
		var mu sync.Mutex // ForEachMaster calls the masters at once
		require.NoError(t, cluster.ForEachMaster(tb.ctx, func(ctx context.Context, node *redis.Client) error {
			found, err := node.Keys(ctx, prefix+"todo*").Result()
			mu.Lock()
			defer mu.Unlock()
			keys = append(keys, found...)
			return err
		}))
	} else {
		found, err := tb.rdb.Keys(tb.ctx, prefix+"todo*").Result()
		require.NoError(t, err)
		keys = found
	}
	items := []string{}
	for _, key := range keys {
		if tb.rdb.Type(tb.ctx, key).Val() != "list" {
			continue
		}
		list, err := tb.rdb.LRange(tb.ctx, key, 0, -1).Result()
		require.NoError(t, err)
		items = append(items, list...)
	}
	sort.Strings(items)
	return items
}

// queuedIndex reads the queued index, sorted.
func queuedIndex(t *testing.T, tb bundle) []string {
	t.Helper()
	members, err := tb.rdb.SMembers(tb.ctx, queues.QueuedKey(tb.slug)).Result()
	require.NoError(t, err)
	sort.Strings(members)
	return members
}

// dumpProject reads every key of the project, to prove an operation
// changed nothing.
func dumpProject(t *testing.T, tb bundle) map[string]string {
	t.Helper()
	dump := map[string]string{}
	keys := []string{queues.ConfigKey(tb.slug), queues.DeadlinesKey(tb.slug), queues.ClaimsKey(tb.slug),
		queues.DoneKey(tb.slug), queues.BudgetKey(tb.slug), queues.StatsKey(tb.slug), queues.LogKey(tb.slug), queues.ExtrasKey(tb.slug),
		queues.DownloaderBytesKey(tb.slug), queues.DownloaderItemsKey(tb.slug)}
	for _, q := range queues.SharedQueues {
		keys = append(keys, queues.QueueKey(tb.slug, q))
	}
	for _, k := range keys {
		v, err := tb.rdb.Dump(tb.ctx, k).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		require.NoError(t, err)
		dump[k] = v
	}
	return dump
}

func TestTTLChangeAppliesToClaimsAlreadyOut(t *testing.T) {
	forEachMode(t, queues.SettingsPatch{ReclaimEnabled: ptr(true), ReclaimTTL: ptr(queues.Duration(6 * time.Hour))}, func(t *testing.T, tb bundle, mode string) {
		tb.enqueue(t, todo, "x", "y")
		tb.claim(t, "alice", 2)
		tb.clock.Advance(90 * time.Minute)
		requireCode(t, tb.claimErr("bobby", 1), queues.CodeNoItem)
		_, err := tb.engine.UpdateProject(tb.ctx, tb.slug, queues.SettingsPatch{ReclaimTTL: ptr(queues.Duration(time.Hour))})
		require.NoError(t, err)
		require.Equal(t, []string{"x", "y"}, tb.claim(t, "bobby", 5))
		checkIndexesAgree(t, tb)
	})
}

func TestDuplicatesInOneClaimAreHandedOutOnce(t *testing.T) {
	forEachMode(t, queues.SettingsPatch{DownloaderBudget: ptr(3)}, func(t *testing.T, tb bundle, mode string) {
		require.Equal(t, queues.EnqueueResult{Queued: 2, AlreadyQueued: 1, Length: 2}, tb.enqueueResult(t, todo, "a", "a", "b"))
		require.Equal(t, queues.EnqueueResult{AlreadyQueued: 1}, tb.enqueueResult(t, queues.Target{Downloader: "alice"}, "b"))
		// Copies that got past the queued index (lists written before it
		// existed) are still handed out once, even within one claim.
		require.NoError(t, tb.rdb.RPush(tb.ctx, queues.QueueKey(tb.slug, queues.QueueTodo), "a").Err())
		require.NoError(t, tb.rdb.RPush(tb.ctx, queues.ReservedQueueKey(tb.slug, "alice"), "b").Err())
		require.Equal(t, []string{"b", "a"}, tb.claim(t, "alice", 10))
		checkIndexesAgree(t, tb)
		_, err := tb.done("alice", "a", "b")
		require.NoError(t, err)
		checkIndexesAgree(t, tb)
		require.Equal(t, queues.Counts{Done: 2}, tb.counts(t))

		// Queuing an item that is out or done skips it.
		tb.enqueue(t, todo, "c")
		tb.claim(t, "alice", 1)
		res := tb.enqueueResult(t, todo, "a", "c", "d")
		require.Equal(t, queues.EnqueueResult{Queued: 1, Skipped: 2, Length: 1}, res)
	})
}

func TestLateDoneAfterReleaseCompletesOnce(t *testing.T) {
	forEachMode(t, queues.SettingsPatch{ReclaimEnabled: ptr(true), ReclaimTTL: ptr(queues.Duration(time.Hour))}, func(t *testing.T, tb bundle, mode string) {
		tb.enqueue(t, todo, "x", "y")
		tb.claim(t, "alice", 2)
		tb.clock.Advance(7 * time.Hour)
		res, err := tb.engine.ReleaseClaims(tb.ctx, tb.slug, queues.ReleaseFilter{OlderThan: 6 * time.Hour})
		require.NoError(t, err)
		require.Equal(t, 2, res.Released)

		// Only a claimant's done completes a released item.
		_, err = tb.done("bobby", "x")
		requireCode(t, err, queues.CodeNotClaimant)
		done, err := tb.done("alice", "x")
		require.NoError(t, err)
		require.Equal(t, 1, done.New)
		require.Equal(t, queues.Counts{Redo: 1, Done: 1}, tb.counts(t))
		assertPlaces(t, tb, map[string]string{"x": "done", "y": "todo:redo"})

		// The next claim of a released item continues its count: due after 2h.
		require.Equal(t, []string{"y"}, tb.claim(t, "bobby", 5))
		// x's released copy was marked when x was done, and dropped when
		// popped: nothing scanned redo for it.
		marks, err := tb.rdb.HLen(tb.ctx, queues.RedoCancelledKey(tb.slug)).Result()
		require.NoError(t, err)
		require.Zero(t, marks)
		stats, err := tb.engine.Stats(tb.ctx, tb.slug)
		require.NoError(t, err)
		require.EqualValues(t, 1, stats.Counters["duplicates_dropped"])
		record, err := tb.rdb.HGet(tb.ctx, queues.ClaimsKey(tb.slug), "y").Result()
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(record, "2 "), record)
		require.True(t, strings.HasSuffix(record, " alice -"), record)
		tb.clock.Advance(119 * time.Minute)
		requireCode(t, tb.claimErr("carol", 1), queues.CodeNoItem)
		tb.clock.Advance(time.Minute)
		require.Equal(t, []string{"y"}, tb.claim(t, "carol", 1))
		// alice, two claims back, may still report it; a stranger may not.
		_, err = tb.done("davey", "y")
		requireCode(t, err, queues.CodeNotClaimant)
		done, err = tb.done("alice", "y")
		require.NoError(t, err)
		require.Equal(t, 1, done.New)
		empty, err := tb.rdb.Exists(tb.ctx, queues.ReleasedKey(tb.slug)).Result()
		require.NoError(t, err)
		require.Zero(t, empty, "no released record outlives its item")
	})
}

func TestDoneByStrangerChangesNothing(t *testing.T) {
	forEachMode(t, queues.SettingsPatch{}, func(t *testing.T, tb bundle, mode string) {
		tb.enqueue(t, todo, "a", "b")
		tb.claim(t, "alice", 1)
		tb.claim(t, "bobby", 1)
		before := dumpProject(t, tb)
		_, err := tb.done("bobby", "b", "a")
		requireCode(t, err, queues.CodeNotClaimant)
		var qe *queues.Error
		require.True(t, errors.As(err, &qe))
		require.Equal(t, []string{"a"}, qe.Items)
		after := dumpProject(t, tb)
		delete(before, queues.StatsKey(tb.slug))
		delete(after, queues.StatsKey(tb.slug))
		require.Equal(t, before, after)
	})
}

func TestByteCountsAreBoundedAndNeverHalfApplied(t *testing.T) {
	forEachMode(t, queues.SettingsPatch{}, func(t *testing.T, tb bundle, mode string) {
		names := make([]string, 100)
		for i := range names {
			names[i] = fmt.Sprintf("i%d", i)
		}
		tb.enqueue(t, todo, names...)
		tb.claim(t, "alice", 100)
		_, err := tb.engine.Done(tb.ctx, queues.DoneRequest{Project: tb.slug, Downloader: "alice", Items: []string{"i0"},
			Bytes: map[string]int64{"data": queues.MaxGroupBytes + 1}})
		requireCode(t, err, queues.CodeInvalid)
		_, err = tb.engine.Done(tb.ctx, queues.DoneRequest{Project: tb.slug, Downloader: "alice", Items: []string{"i0"},
			ID: []byte(`"` + strings.Repeat("x", queues.MaxIDBytes) + `"`)})
		requireCode(t, err, queues.CodeInvalid)

		// A counter pushed near the top saturates instead of failing the
		// script after it moved items.
		require.NoError(t, tb.rdb.HSet(tb.ctx, queues.StatsKey(tb.slug), "bytes_done", "4611686018427387000").Err())
		require.NoError(t, tb.rdb.HSet(tb.ctx, queues.DownloaderBytesKey(tb.slug), "alice", "9223372036854775000").Err())
		res, err := tb.engine.Done(tb.ctx, queues.DoneRequest{Project: tb.slug, Downloader: "alice", Items: []string{"i1"},
			Bytes: map[string]int64{"data": queues.MaxGroupBytes}})
		require.NoError(t, err)
		require.Equal(t, 1, res.New)
		stats, err := tb.engine.Stats(tb.ctx, tb.slug)
		require.NoError(t, err)
		require.EqualValues(t, 1, stats.Counters["items_done"])
		require.EqualValues(t, int64(1)<<62, stats.Counters["bytes_done"])

		// Group names are bounded: past 64 groups, bytes count as "other".
		for i := 2; i < 80; i++ {
			_, err := tb.engine.Done(tb.ctx, queues.DoneRequest{Project: tb.slug, Downloader: "alice", Items: []string{names[i]},
				Bytes: map[string]int64{fmt.Sprintf("group%d", i): 10}})
			require.NoError(t, err)
		}
		// The frontend buffers these counts (queues/counters.go): flush them.
		require.NoError(t, tb.engine.FlushCounters(tb.ctx))
		groups, err := tb.rdb.HLen(tb.ctx, queues.DomainBytesKey(tb.slug)).Result()
		require.NoError(t, err)
		require.EqualValues(t, 65, groups)
	})
}

func TestRateLimitAboveOnePerMillisecond(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		// 200,000/min is 3.33 requests per ms, faster than the ms clock.
		tb := setup(t, b, queues.SettingsPatch{RatePerMinute: ptr(200000.0), RateBurst: ptr(10), MaxMulti: ptr(1)})
		names := make([]string, 1000)
		for i := range names {
			names[i] = fmt.Sprintf("i%d", i)
		}
		tb.enqueue(t, todo, names...)
		served := 0
		for range 100 { // all within one millisecond: only the burst
			if tb.claimErr("alice", 1) == nil {
				served++
			}
		}
		require.Equal(t, 10, served)
		for range 30 { // then 30 ms of pressure, 20 tries per ms
			tb.clock.Advance(time.Millisecond)
			for range 20 {
				if tb.claimErr("alice", 1) == nil {
					served++
				}
			}
		}
		require.InDelta(t, 10+30*200000.0/60000, served, 1.5, "served %d", served)
	})
}

func TestConcurrentSettingChangesKeepEachOther(t *testing.T) {
	forEachMode(t, queues.SettingsPatch{}, func(t *testing.T, tb bundle, mode string) {
		var wg sync.WaitGroup
		for i := range 20 {
			wg.Add(2)
			go func() {
				defer wg.Done()
				_, err := tb.engine.UpdateProject(tb.ctx, tb.slug, queues.SettingsPatch{ClaimsLimit: ptr(1000 + i)})
				require.NoError(t, err)
			}()
			go func() {
				defer wg.Done()
				_, err := tb.engine.UpdateProject(tb.ctx, tb.slug, queues.SettingsPatch{Title: ptr("title")})
				require.NoError(t, err)
			}()
		}
		wg.Wait()
		p, err := tb.engine.Project(tb.ctx, tb.slug)
		require.NoError(t, err)
		require.Equal(t, "title", p.Title)
		require.GreaterOrEqual(t, p.ClaimsLimit, 1000, "no PATCH of the title undid a claims limit")
	})
}

// TestConfigIsAHashTable: claim.lua and done.lua read the config on every
// call, and as a hash table each field is one look-up, not a scan. A new
// project's config is a table from its creation; one written by a build
// from before (a listpack) becomes one at its next settings change, with
// its settings as they were.
func TestConfigIsAHashTable(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{Title: ptr("before")})
		key := queues.ConfigKey(tb.slug)
		require.Equal(t, "hashtable", tb.rdb.ObjectEncoding(tb.ctx, key).Val())

		// The previous build's config: the same fields, no long one.
		fields, err := tb.rdb.HGetAll(tb.ctx, key).Result()
		require.NoError(t, err)
		delete(fields, "encoding")
		require.NoError(t, tb.rdb.Del(tb.ctx, key).Err())
		require.NoError(t, tb.rdb.HSet(tb.ctx, key, fields).Err())
		require.Equal(t, "listpack", tb.rdb.ObjectEncoding(tb.ctx, key).Val())
		tb.enqueue(t, todo, "a")
		require.Equal(t, []string{"a"}, tb.claim(t, "alice", 1), "an old config serves as before")

		_, err = tb.engine.UpdateProject(tb.ctx, tb.slug, queues.SettingsPatch{ClaimsLimit: ptr(5)})
		require.NoError(t, err)
		require.Equal(t, "hashtable", tb.rdb.ObjectEncoding(tb.ctx, key).Val())
		p, err := tb.engine.Project(tb.ctx, tb.slug)
		require.NoError(t, err)
		require.Equal(t, "before", p.Title)
		require.Equal(t, 5, p.ClaimsLimit)
	})
}

// TestReservedSetShrinksWhenAQueueEmpties: Counts reads one length per
// downloader in the reserved set, so the set must not keep every nick that
// ever had a reservation.
func TestReservedSetShrinksWhenAQueueEmpties(t *testing.T) {
	forEachMode(t, queues.SettingsPatch{}, func(t *testing.T, tb bundle, mode string) {
		for _, nick := range []string{"alice", "bobby"} {
			_, err := tb.engine.Enqueue(tb.ctx, tb.slug, queues.Target{Downloader: nick}, []queues.QueueItem{{Name: "for-" + nick + "-1"}, {Name: "for-" + nick + "-2"}})
			require.NoError(t, err)
		}
		members := func() []string {
			m, err := tb.rdb.SMembers(tb.ctx, queues.ReservedSetKey(tb.slug)).Result()
			require.NoError(t, err)
			sort.Strings(m)
			return m
		}
		require.Equal(t, []string{"alice", "bobby"}, members())
		require.Equal(t, []string{"for-alice-1"}, tb.claim(t, "alice", 1))
		require.Equal(t, []string{"alice", "bobby"}, members(), "alice's queue still holds one")
		require.Equal(t, []string{"for-alice-2"}, tb.claim(t, "alice", 1))
		require.Equal(t, []string{"bobby"}, members())
		require.Zero(t, tb.rdb.Exists(tb.ctx, queues.ReservedQueueKey(tb.slug, "alice")).Val(), "her emptied queue is gone")
		require.EqualValues(t, 2, tb.counts(t).Reserved)
		require.Equal(t, []string{"for-bobby-1", "for-bobby-2"}, tb.claim(t, "bobby", 5))
		require.Empty(t, members())
		require.Zero(t, tb.counts(t).Reserved)
	})
}
