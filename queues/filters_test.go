package queues_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/queues"
)

// TestFiltersDropAndCountOnAdminAdd: items matching a filter (type, glob or
// RE2) are dropped by an admin add, to a shared queue or a reserved one,
// or the scored queue, and counted in items_filtered; the others are
// queued as before.
func TestFiltersDropAndCountOnAdminAdd(t *testing.T) {
	forEachMode(t, queues.SettingsPatch{}, func(t *testing.T, tb bundle, mode string) {
		require.NoError(t, tb.engine.AddFilter(tb.ctx, tb.slug, queues.Filter{Name: "no-ads", Type: "ad"}))
		require.NoError(t, tb.engine.AddFilter(tb.ctx, tb.slug, queues.Filter{Name: "no-tmp", Glob: "url:*/tmp/*"}))
		require.NoError(t, tb.engine.AddFilter(tb.ctx, tb.slug, queues.Filter{Name: "digits", Regex: `^user:[0-9]+$`}))

		res := tb.enqueueResult(t, todo, "ad:1", "url:http://a/tmp/x", "user:123", "user:bob", "url:http://a/ok")
		require.Equal(t, 3, res.Filtered)
		require.Equal(t, 2, res.Queued)
		reserved, err := tb.engine.Enqueue(tb.ctx, tb.slug, queues.Target{Downloader: "alice"},
			[]queues.QueueItem{{Name: "ad:2"}, {Name: "user:carol"}})
		require.NoError(t, err)
		require.Equal(t, 1, reserved.Filtered)
		require.Equal(t, 1, reserved.Queued)
		scored := tb.enqueueScored(t, map[string]float64{"ad:3": 2, "user:dan": 1})
		require.Equal(t, queues.ScoredResult{Queued: 1, Filtered: 1, Length: 1}, scored)

		require.Equal(t, map[string][]string{"ad:1": nil, "user:123": nil, "user:bob": {"todo"}},
			tb.places(t, "ad:1", "user:123", "user:bob"))
		stats, err := tb.engine.Stats(tb.ctx, tb.slug)
		require.NoError(t, err)
		require.EqualValues(t, 5, stats.Counters["items_filtered"])
		require.EqualValues(t, 4, stats.Counters["items_queued"])
		require.InDelta(t, 5.0/9, stats.FilterRate, 1e-9, "filtered over filtered plus queued")

		// Removed, a filter drops nothing more.
		require.NoError(t, tb.engine.RemoveFilter(tb.ctx, tb.slug, "no-ads"))
		require.Equal(t, 0, tb.enqueueResult(t, todo, "ad:1").Filtered)
		require.Equal(t, []string{"todo"}, tb.places(t, "ad:1")["ad:1"])
	})
}

// TestFilterAddedElsewhereIsSeenAtOnce: a frontend that cached the filter
// list (here: none) is refused by the script once another frontend adds a
// filter, reads the new list and drops the item.
func TestFilterAddedElsewhereIsSeenAtOnce(t *testing.T) {
	forEachMode(t, queues.SettingsPatch{}, func(t *testing.T, tb bundle, mode string) {
		tb.enqueue(t, todo, "warm:1") // this engine caches "no filters"
		other := queues.NewEngine(tb.rdb, queues.Options{Clock: tb.clock, Logger: quietLogger})
		require.NoError(t, other.AddFilter(tb.ctx, tb.slug, queues.Filter{Name: "warm", Type: "warm"}))
		res := tb.enqueueResult(t, todo, "warm:2", "cold:1")
		require.Equal(t, queues.EnqueueResult{Queued: 1, Filtered: 1, Length: 2}, res)
	})
}

// TestConcurrentFilterChangesAllLand: two frontends adding filters at the
// same time (and one removing) lose none: a change made from a list that
// another changed in between is refused by the script and made again from
// the new list.
func TestConcurrentFilterChangesAllLand(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setupProject(t, b, "proj-filters", queues.SettingsPatch{})
		require.NoError(t, tb.engine.AddFilter(tb.ctx, tb.slug, queues.Filter{Name: "gone", Type: "gone"}))
		engines := []*queues.Engine{tb.engine, queues.NewEngine(tb.rdb, queues.Options{Clock: tb.clock, Logger: quietLogger})}
		var wg sync.WaitGroup
		errs := make(chan error, 41)
		for e, engine := range engines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 20 {
					errs <- engine.AddFilter(tb.ctx, tb.slug, queues.Filter{Name: fmt.Sprintf("f%d-%d", e, i), Type: fmt.Sprintf("t%d-%d", e, i)})
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- engines[1].RemoveFilter(tb.ctx, tb.slug, "gone")
		}()
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		filters, err := tb.engine.Filters(tb.ctx, tb.slug)
		require.NoError(t, err)
		names := map[string]bool{}
		for _, f := range filters {
			names[f.Name] = true
		}
		require.Len(t, names, 40, "every add landed, the removal too: %v", names)
		require.False(t, names["gone"])
	})
}

// TestBadFilterChangesNothing: a bad RE2, a bad glob, no or two matchers,
// a bad or duplicate name, an unknown project and removing an unknown
// filter are refused with a clear error, and the list stays as it was.
func TestBadFilterChangesNothing(t *testing.T) {
	forEachMode(t, queues.SettingsPatch{}, func(t *testing.T, tb bundle, mode string) {
		good := queues.Filter{Name: "ads", Type: "ad"}
		require.NoError(t, tb.engine.AddFilter(tb.ctx, tb.slug, good))
		for _, c := range []struct {
			f    queues.Filter
			says string
		}{
			{queues.Filter{Name: "re", Regex: `(unclosed`}, "bad RE2 expression"},
			{queues.Filter{Name: "glob", Glob: `url:[abc`}, "bad glob"},
			{queues.Filter{Name: "none"}, "set exactly one of type, glob and regex"},
			{queues.Filter{Name: "two", Type: "a", Glob: "b*"}, "set exactly one of type, glob and regex"},
			{queues.Filter{Name: "Bad Name", Type: "a"}, "name must be"},
			{queues.Filter{Name: "ads", Type: "other"}, "duplicate name"},
			{queues.Filter{Name: "colon", Type: "a:b"}, "type must be an item prefix"},
		} {
			err := tb.engine.AddFilter(tb.ctx, tb.slug, c.f)
			requireCode(t, err, queues.CodeInvalid)
			require.Contains(t, err.Error(), c.says)
			require.Contains(t, err.Error(), "filter")
		}
		requireCode(t, tb.engine.RemoveFilter(tb.ctx, tb.slug, "nope"), queues.CodeInvalid)
		requireCode(t, tb.engine.AddFilter(tb.ctx, "no-such-project", good), queues.CodeProjectNotFound)
		filters, err := tb.engine.Filters(tb.ctx, tb.slug)
		require.NoError(t, err)
		require.Equal(t, []queues.Filter{good}, filters)
		version, err := tb.rdb.HGet(tb.ctx, queues.ConfigKey(tb.slug), "filters_version").Result()
		require.NoError(t, err)
		require.Equal(t, "1", version, "only the good add bumped the version")
	})
}

// TestFiltersDropAndCountOnBackfeed: a backfeed (bloom_add.lua) and a
// registered add drop matching items before the Bloom filter sees them
// (so a later change of the filters lets them in), and count them.
func TestFiltersDropAndCountOnBackfeed(t *testing.T) {
	forEachMode(t, queues.SettingsPatch{BackfeedSecret: ptr("sekrit_12345")}, func(t *testing.T, tb bundle, mode string) {
		require.NoError(t, tb.engine.AddFilter(tb.ctx, tb.slug, queues.Filter{Name: "js", Glob: "*.js"}))
		res, err := tb.engine.Backfeed(tb.ctx, tb.slug, "sekrit_12345", []string{"a.js", "b.html", "c.js"})
		require.NoError(t, err)
		require.Equal(t, 2, res.Filtered)
		require.Equal(t, 1, res.New)
		reg, err := tb.engine.EnqueueRegistered(tb.ctx, tb.slug, queues.QueueTodo, []string{"d.js", "e.css"})
		require.NoError(t, err)
		require.Equal(t, 1, reg.Filtered)
		require.Equal(t, 1, reg.New)
		require.Equal(t, map[string][]string{"a.js": nil, "b.html": {"todo"}, "d.js": nil, "e.css": {"todo"}},
			tb.places(t, "a.js", "b.html", "d.js", "e.css"))

		stats, err := tb.engine.Stats(tb.ctx, tb.slug)
		require.NoError(t, err)
		require.EqualValues(t, 3, stats.Counters["items_filtered"])

		// All filtered: the batch is still counted.
		res, err = tb.engine.Backfeed(tb.ctx, tb.slug, "sekrit_12345", []string{"f.js"})
		require.NoError(t, err)
		require.Equal(t, queues.BackfeedResult{Received: 1, Filtered: 1}, res)

		// The filter never added them to the Bloom filter: removed, they come in.
		require.NoError(t, tb.engine.RemoveFilter(tb.ctx, tb.slug, "js"))
		res, err = tb.engine.Backfeed(tb.ctx, tb.slug, "sekrit_12345", []string{"a.js"})
		require.NoError(t, err)
		require.Equal(t, 1, res.New)
		stats, err = tb.engine.Stats(tb.ctx, tb.slug)
		require.NoError(t, err)
		require.EqualValues(t, 4, stats.Counters["items_filtered"])
	})
}

// TestSiftFiltersDropsWhatIsQueued: a filter added after items were queued
// drops them from the shared queues and a limit group's sub-queue on a
// sift: they leave the lists and the queued index (so the same names can
// be queued again once the filter goes), they are counted, and the kept
// items stay in their order. A second sift finds nothing more.
func TestSiftFiltersDropsWhatIsQueued(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setupProject(t, b, "proj-sift", queues.SettingsPatch{})
		_, err := tb.engine.SetLimitGroups(tb.ctx, tb.slug, []queues.LimitGroup{{Name: "users", Type: "user", RatePerMinute: 60, Burst: 10}})
		require.NoError(t, err)
		tb.enqueue(t, todo, "ad:1", "keep:1", "ad:2", "keep:2", "user:ad-9", "user:bob")
		tb.enqueue(t, queues.Target{Queue: queues.QueueSecondary}, "ad:3", "keep:3")
		before, err := tb.engine.Stats(tb.ctx, tb.slug)
		require.NoError(t, err)

		require.NoError(t, tb.engine.AddFilter(tb.ctx, tb.slug, queues.Filter{Name: "ads", Regex: `(^|:)ad`}))
		r, err := tb.engine.SiftFilters(tb.ctx, tb.slug)
		require.NoError(t, err)
		require.Equal(t, 4, r.Moved, "ad:1, ad:2, ad:3 and user:ad-9 dropped")
		require.Equal(t, 8, r.Scanned)

		todoList, err := tb.rdb.LRange(tb.ctx, queues.QueueKey(tb.slug, queues.QueueTodo), 0, -1).Result()
		require.NoError(t, err)
		require.Equal(t, []string{"keep:1", "keep:2"}, todoList, "kept in their order")
		group, err := tb.rdb.LRange(tb.ctx, queues.GroupQueueKey(tb.slug, queues.QueueTodo, "users"), 0, -1).Result()
		require.NoError(t, err)
		require.Equal(t, []string{"user:bob"}, group)
		secondary, err := tb.rdb.LRange(tb.ctx, queues.QueueKey(tb.slug, queues.QueueSecondary), 0, -1).Result()
		require.NoError(t, err)
		require.Equal(t, []string{"keep:3"}, secondary)
		require.Equal(t, map[string][]string{"ad:1": nil, "user:ad-9": nil, "keep:1": {"todo"}, "user:bob": {"todo"}},
			tb.places(t, "ad:1", "user:ad-9", "keep:1", "user:bob"))
		after, err := tb.engine.Stats(tb.ctx, tb.slug)
		require.NoError(t, err)
		require.EqualValues(t, before.Counters["items_filtered"]+4, after.Counters["items_filtered"])

		again, err := tb.engine.SiftFilters(tb.ctx, tb.slug)
		require.NoError(t, err)
		require.Equal(t, queues.SiftResult{Moved: 0, Scanned: 4}, again)

		// The dropped names left the queued index: without the filter they
		// are queued again, not refused as waiting already.
		require.NoError(t, tb.engine.RemoveFilter(tb.ctx, tb.slug, "ads"))
		res := tb.enqueueResult(t, todo, "ad:1", "ad:2")
		require.Equal(t, 2, res.Queued)

		_, err = tb.engine.SiftFilters(tb.ctx, "no-such-project")
		require.Error(t, err)
	})
}

// TestSiftFiltersReachesReservedAndScoredQueues: a filter added after
// items were reserved for a downloader or queued by score drops them from
// there too on a sift, with their extras, and counts them; the others stay
// (the scored ones with their scores), and are served.
func TestSiftFiltersReachesReservedAndScoredQueues(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setupProject(t, b, "proj-sift-rs", queues.SettingsPatch{})
		_, err := tb.engine.Enqueue(tb.ctx, tb.slug, queues.Target{Downloader: "alice"}, []queues.QueueItem{
			{Name: "ad:r1", Extras: []byte(`{"why":"ad"}`)}, {Name: "keep:r1"}, {Name: "ad:r2"}})
		require.NoError(t, err)
		// More than one ZSCAN page, so the scan's cursor is followed.
		scores := map[string]float64{}
		for i := range 1500 {
			scores[fmt.Sprintf("ad:s%04d", i)] = float64(i)
		}
		scores["keep:s1"] = 5000.5
		scores["keep:s2"] = -1
		tb.enqueueScored(t, scores)
		before, err := tb.engine.Stats(tb.ctx, tb.slug)
		require.NoError(t, err)

		require.NoError(t, tb.engine.AddFilter(tb.ctx, tb.slug, queues.Filter{Name: "ads", Glob: "ad:*"}))
		r, err := tb.engine.SiftFilters(tb.ctx, tb.slug)
		require.NoError(t, err)
		require.Equal(t, 1502, r.Moved, "2 reserved and 1500 scored ads dropped")
		require.Equal(t, 3+1502, r.Scanned)

		reserved, err := tb.rdb.LRange(tb.ctx, queues.ReservedQueueKey(tb.slug, "alice"), 0, -1).Result()
		require.NoError(t, err)
		require.Equal(t, []string{"keep:r1"}, reserved)
		scored, err := tb.rdb.ZRangeWithScores(tb.ctx, queues.QueueKey(tb.slug, queues.QueueScored), 0, -1).Result()
		require.NoError(t, err)
		require.Equal(t, []redis.Z{{Score: -1, Member: "keep:s2"}, {Score: 5000.5, Member: "keep:s1"}}, scored)
		extra, err := tb.rdb.HExists(tb.ctx, queues.ExtrasKey(tb.slug), "ad:r1").Result()
		require.NoError(t, err)
		require.False(t, extra, "a dropped item's extras go with it")
		require.Equal(t, map[string][]string{"ad:r1": nil, "keep:r1": {"todo"}}, tb.places(t, "ad:r1", "keep:r1"))
		after, err := tb.engine.Stats(tb.ctx, tb.slug)
		require.NoError(t, err)
		require.EqualValues(t, before.Counters["items_filtered"]+1502, after.Counters["items_filtered"])
		c := tb.counts(t)
		require.Equal(t, [2]int64{1, 2}, [2]int64{c.Reserved, c.Scored})

		require.ElementsMatch(t, []string{"keep:r1", "keep:s1", "keep:s2"}, tb.claim(t, "alice", 10))
	})
}
