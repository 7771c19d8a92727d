package queues_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/bits-and-blooms/bloom/v3"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/queues"
)

func TestBloomGenerationsRollOverAndAllAreTested(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{BackfeedSecret: ptr("secret_123"), BloomCapacity: ptr(1000)})
		items := names("item-", 2500)
		res, err := tb.engine.Backfeed(tb.ctx, tb.slug, "secret_123", items)
		require.NoError(t, err)
		require.Equal(t, queues.BackfeedResult{Received: 2500, New: 2500}, res)
		gens, err := tb.rdb.HGet(tb.ctx, queues.BloomMetaKey(tb.slug), "gens").Result()
		require.NoError(t, err)
		require.Equal(t, "3", gens, "a new generation after each 1,000 items")
		// Items from the first, full generation are still recognised.
		res, err = tb.engine.Backfeed(tb.ctx, tb.slug, "secret_123", items[:10])
		require.NoError(t, err)
		require.Equal(t, 10, res.Duplicate)
		_, err = tb.engine.Backfeed(tb.ctx, tb.slug, "wrong_secret", items[:1])
		requireCode(t, err, queues.CodeBlocked)
		require.EqualValues(t, 2500, tb.counts(t).Backfeed)

		// Backfed items follow limit groups like any queued item.
		_, err = tb.engine.SetLimitGroups(tb.ctx, tb.slug, []queues.LimitGroup{{Name: "users", Type: "user", RatePerMinute: 0}})
		require.NoError(t, err)
		_, err = tb.engine.Backfeed(tb.ctx, tb.slug, "secret_123", []string{"user:x", "post:y"})
		require.NoError(t, err)
		assertPlaces(t, tb, map[string]string{"user:x": "todo:backfeed:g:users", "post:y": "todo:backfeed"})
	})
}

// TestBloomFalsePositiveRate fills a generation sized for n items at a
// designed rate with n distinct items, then offers n other distinct items
// and counts how many the filter wrongly calls duplicates; 10x the
// designed rate is the bound. By default 50k items at 1e-4 (expected 5
// false positives; seconds under -race); with HOARD_TEST_LONG=1 (make
// test-long, CI) the production shape, 1M items at 1e-6 (minutes under
// -race).
func TestBloomFalsePositiveRate(t *testing.T) {
	b := redistest.Require(t)[0]
	require.NoError(t, redistest.Flush(t.Context(), b))
	n, designed := 50_000, 1e-4
	if os.Getenv("HOARD_TEST_LONG") != "" {
		n, designed = 1_000_000, 1e-6
	}
	tb := setup(t, b, queues.SettingsPatch{BackfeedSecret: ptr("secret_123"), BloomCapacity: ptr(n), BloomFPRate: ptr(designed)})
	batch := make([]string, 0, 10000)
	offer := func(prefix string) queues.BackfeedResult {
		var total queues.BackfeedResult
		for i := 0; i < n; i++ {
			batch = append(batch, fmt.Sprintf("%s/%08d", prefix, i))
			if len(batch) == cap(batch) {
				res, err := tb.engine.Backfeed(tb.ctx, tb.slug, "secret_123", batch)
				require.NoError(t, err)
				total.New += res.New
				total.Duplicate += res.Duplicate
				batch = batch[:0]
			}
		}
		return total
	}
	first := offer("https://example.org/first")
	second := offer("https://example.org/second")
	rate := float64(second.Duplicate) / float64(n)
	t.Logf("filled with %d distinct items (%d were wrongly called duplicates while filling); %d of %d other distinct items were false positives: rate %.2g",
		first.New, first.Duplicate, second.Duplicate, n, rate)
	if out := os.Getenv("HOARD_FP_REPORT"); out != "" {
		_ = os.WriteFile(out, []byte(fmt.Sprintf("false positives: %d of %d (rate %.2g)\n", second.Duplicate, n, rate)), 0o644)
	}
	require.LessOrEqual(t, rate, 10*designed, "the designed rate is %g; 10x is the bound", designed)
}

// TestBloomSettingsChangeShapesOnlyNewGenerations raises bloom_capacity and
// the false-positive rate on a filter with items in it: the generations
// already written keep their own m and k, so old items are still known and
// new items are not mistaken for duplicates.
func TestBloomSettingsChangeShapesOnlyNewGenerations(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{BackfeedSecret: ptr("secret_123"), BloomCapacity: ptr(1000)})
		old := names("old-", 1500)
		res, err := tb.engine.Backfeed(tb.ctx, tb.slug, "secret_123", old)
		require.NoError(t, err)
		require.Equal(t, 1500, res.New)

		_, err = tb.engine.UpdateProject(tb.ctx, tb.slug, queues.SettingsPatch{BloomCapacity: ptr(50_000), BloomFPRate: ptr(1e-4)})
		require.NoError(t, err)
		fresh := names("new-", 3000)
		res, err = tb.engine.Backfeed(tb.ctx, tb.slug, "secret_123", fresh)
		require.NoError(t, err)
		require.Equal(t, 3000, res.New, "no new item is taken for a duplicate after the settings change")
		res, err = tb.engine.Backfeed(tb.ctx, tb.slug, "secret_123", append(append([]string{}, old...), fresh...))
		require.NoError(t, err)
		require.Equal(t, 4500, res.Duplicate, "old and new items are all known")

		meta, err := tb.rdb.HGetAll(tb.ctx, queues.BloomMetaKey(tb.slug)).Result()
		require.NoError(t, err)
		first, err := queues.BloomShape(1000, 1e-6, 0)
		require.NoError(t, err)
		third, err := queues.BloomShape(50_000, 1e-4, 0)
		require.NoError(t, err)
		require.Regexp(t, `^\d+:\d+:1000:w\d$`, first, "new generations are blocked")
		require.Equal(t, first+","+first+","+third, meta["shapes"])
		require.Equal(t, "3", meta["gens"])
	})
}

// TestBloomLegacyMetaIsMigrated: a filter written before per-generation
// shapes were recorded (one m and k in meta) keeps working.
func TestBloomLegacyMetaIsMigrated(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{BackfeedSecret: ptr("secret_123"), BloomCapacity: ptr(1000)})
		m, k := queues.BloomParameters(1000, 1e-6)
		require.NoError(t, tb.rdb.HSet(tb.ctx, queues.BloomMetaKey(tb.slug), "m", m, "k", k, "gens", 1, "count", 0).Err())
		items := names("legacy-", 500)
		res, err := tb.engine.Backfeed(tb.ctx, tb.slug, "secret_123", items)
		require.NoError(t, err)
		require.Equal(t, 500, res.New)
		res, err = tb.engine.Backfeed(tb.ctx, tb.slug, "secret_123", items)
		require.NoError(t, err)
		require.Equal(t, 500, res.Duplicate)
		shapes, err := tb.rdb.HGet(tb.ctx, queues.BloomMetaKey(tb.slug), "shapes").Result()
		require.NoError(t, err)
		require.Equal(t, fmt.Sprintf("%d:%d:1000", m, k), shapes)
	})
}

// TestBloomGenerationLargerThanRedisStringIsRefused: a capacity whose
// generation would need more than 2^32 bits is refused when it is set,
// instead of failing SETBIT halfway through a batch.
func TestBloomGenerationLargerThanRedisStringIsRefused(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{BackfeedSecret: ptr("secret_123")})
		_, err := tb.engine.UpdateProject(tb.ctx, tb.slug, queues.SettingsPatch{BloomCapacity: ptr(200_000_000)})
		requireCode(t, err, queues.CodeInvalid)
		require.Contains(t, err.Error(), "512 MiB")
		_, err = tb.engine.UpdateProject(tb.ctx, tb.slug, queues.SettingsPatch{BloomCapacity: ptr(100_000_000)})
		require.NoError(t, err, "100M items at 1e-6 fit in one generation")
	})
}

// TestRecentlyDoneItemsAreNotQueuedAgainWithoutADoneSet: done_mode count
// (and archive) keep no done set, only recent_done; backfeed and enqueue
// must still recognise an item completed recently.
func TestRecentlyDoneItemsAreNotQueuedAgainWithoutADoneSet(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{BackfeedSecret: ptr("secret_123"), DoneMode: ptr(queues.DoneCount)})
		tb.enqueue(t, todo, "url:a", "url:b")
		got := tb.claim(t, "alice", 2)
		_, err := tb.done("alice", got...)
		require.NoError(t, err)
		card, err := tb.rdb.SCard(tb.ctx, queues.DoneKey(tb.slug)).Result()
		require.NoError(t, err)
		require.Zero(t, card, "no done set in count mode")

		res, err := tb.engine.Backfeed(tb.ctx, tb.slug, "secret_123", []string{"url:a", "url:c"})
		require.NoError(t, err)
		require.Equal(t, queues.BackfeedResult{Received: 2, New: 1, Duplicate: 1, Placed: 1}, res)
		reg, err := tb.engine.EnqueueRegistered(tb.ctx, tb.slug, queues.QueueTodo, []string{"url:b"})
		require.NoError(t, err)
		require.Equal(t, queues.BackfeedResult{Received: 1, Duplicate: 1, Placed: 1}, reg)
		enq := tb.enqueueResult(t, todo, "url:a", "url:b", "url:d")
		require.Equal(t, 1, enq.Queued)
		require.Equal(t, 2, enq.Skipped, "recently done items are skipped")
		c := tb.counts(t)
		require.EqualValues(t, 1, c.Backfeed)
		require.EqualValues(t, 1, c.Todo)
	})
}

// TestClassicGenerationOfTheBuildBeforeKeepsWorking: a filter written by the
// build before blocked generations (a classic generation with room left)
// is filled as it is, then a blocked generation starts; every item of both
// stays known, and the classic generation's bits are where that build put
// them.
func TestClassicGenerationOfTheBuildBeforeKeepsWorking(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{BackfeedSecret: ptr("secret_123"), BloomCapacity: ptr(1000)})
		m, k := queues.BloomParameters(1000, 1e-6)
		classic := fmt.Sprintf("%d:%d:1000", m, k)
		// What the build before leaves after its first 200 items.
		before := names("before-", 200)
		require.NoError(t, tb.rdb.HSet(tb.ctx, queues.BloomMetaKey(tb.slug), "gens", 1, "count", 200, "shapes", classic).Err())
		for _, item := range before {
			for _, loc := range bloom.Locations([]byte(item), k) {
				require.NoError(t, tb.rdb.SetBit(tb.ctx, queues.BloomKey(tb.slug, 1), int64(loc%uint64(m)), 1).Err())
			}
		}

		res, err := tb.engine.Backfeed(tb.ctx, tb.slug, "secret_123", before)
		require.NoError(t, err)
		require.Equal(t, 200, res.Duplicate, "the build before's items are known")
		after := names("after-", 1300)
		res, err = tb.engine.Backfeed(tb.ctx, tb.slug, "secret_123", after)
		require.NoError(t, err)
		require.Equal(t, 1300, res.New)
		blocked, err := queues.BloomShape(1000, 1e-6, 0)
		require.NoError(t, err)
		meta, err := tb.rdb.HGetAll(tb.ctx, queues.BloomMetaKey(tb.slug)).Result()
		require.NoError(t, err)
		require.Equal(t, classic+","+blocked, meta["shapes"], "generation 1 stays classic, generation 2 is blocked")
		require.Equal(t, "500", meta["count"], "800 filled generation 1, 500 went into generation 2")
		// The classic generation's new items have their k bits where the
		// build before looks.
		for _, loc := range bloom.Locations([]byte(after[0]), k) {
			bit, err := tb.rdb.GetBit(tb.ctx, queues.BloomKey(tb.slug, 1), int64(loc%uint64(m))).Result()
			require.NoError(t, err)
			require.EqualValues(t, 1, bit)
		}
		res, err = tb.engine.Backfeed(tb.ctx, tb.slug, "secret_123", append(append([]string{}, before...), after...))
		require.NoError(t, err)
		require.Equal(t, 1500, res.Duplicate, "every item of both generations is known")
		require.EqualValues(t, 1300, tb.counts(t).Backfeed)
	})
}

// TestBloomWordsShapeOnlyNewGenerations: a generation of three words per
// item (what the build before started at the default rate) keeps its shape
// and its items when bloom_words changes, and the next generation takes the
// new count; a bloom_words outside 0 or 2-4 is refused and changes nothing.
func TestBloomWordsShapeOnlyNewGenerations(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{BackfeedSecret: ptr("secret_123"), BloomCapacity: ptr(1000), BloomWords: ptr(3)})
		before := names("before-", 600)
		res, err := tb.engine.Backfeed(tb.ctx, tb.slug, "secret_123", before)
		require.NoError(t, err)
		require.Equal(t, 600, res.New)
		three, err := queues.BloomShape(1000, 1e-6, 3)
		require.NoError(t, err)
		require.Regexp(t, `:w3$`, three)

		for _, words := range []int{1, 5, -1} {
			_, err = tb.engine.UpdateProject(tb.ctx, tb.slug, queues.SettingsPatch{BloomWords: ptr(words)})
			requireCode(t, err, queues.CodeInvalid)
			require.Contains(t, err.Error(), "bloom_words")
		}
		project, err := tb.engine.Project(tb.ctx, tb.slug)
		require.NoError(t, err)
		require.Equal(t, 3, project.BloomWords, "a refused bloom_words changes nothing")

		automatic, err := queues.BloomShape(1000, 1e-6, 0)
		require.NoError(t, err)
		require.Equal(t, three, automatic, "the automatic choice at 1e-6 is three words")
		_, err = tb.engine.UpdateProject(tb.ctx, tb.slug, queues.SettingsPatch{BloomWords: ptr(2)})
		require.NoError(t, err)
		after := names("after-", 1000)
		res, err = tb.engine.Backfeed(tb.ctx, tb.slug, "secret_123", after)
		require.NoError(t, err)
		require.Equal(t, 1000, res.New, "no new item is taken for a duplicate")
		two, err := queues.BloomShape(1000, 1e-6, 2)
		require.NoError(t, err)
		require.Regexp(t, `:w2$`, two)
		meta, err := tb.rdb.HGetAll(tb.ctx, queues.BloomMetaKey(tb.slug)).Result()
		require.NoError(t, err)
		require.Equal(t, three+","+two, meta["shapes"], "generation 1 keeps three words, generation 2 takes two")
		require.Equal(t, "600", meta["count"], "400 filled generation 1, 600 went into generation 2")
		res, err = tb.engine.Backfeed(tb.ctx, tb.slug, "secret_123", append(append([]string{}, before...), after...))
		require.NoError(t, err)
		require.Equal(t, 1600, res.Duplicate, "every item of both generations is known")
		require.EqualValues(t, 1600, tb.counts(t).Backfeed)
	})
}

// TestBackfeedLooksUpOnlyItemsThatCouldHaveBypassedTheFilter: the batch that
// starts the Bloom filter of a project no item has entered sets bloom_only
// (every item entered through the filter), so a backfeed does not look up
// the items the filter has not seen in out, done, released, failed or the
// queues; the first item let in any other way (enqueue, the scored queue,
// an import) clears it, and from then on such an item is found where it
// is. A filter started in a project with items never sets it.
func TestBackfeedLooksUpOnlyItemsThatCouldHaveBypassedTheFilter(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		for _, bypass := range []string{"enqueue", "scored", "import"} {
			t.Run(bypass, func(t *testing.T) {
				tb := setupProject(t, b, "proj-"+bypass, queues.SettingsPatch{BackfeedSecret: ptr("secret_123"), BloomCapacity: ptr(1000)})
				bloomOnly := func() string {
					t.Helper()
					v, err := tb.rdb.HGet(tb.ctx, queues.ConfigKey(tb.slug), "bloom_only").Result()
					if err != nil {
						require.ErrorIs(t, err, redis.Nil)
					}
					return v
				}
				require.Empty(t, bloomOnly(), "no filter yet")
				res, err := tb.engine.Backfeed(tb.ctx, tb.slug, "secret_123", []string{"a", "b"})
				require.NoError(t, err)
				require.Equal(t, queues.BackfeedResult{Received: 2, New: 2}, res)
				require.Equal(t, "1", bloomOnly(), "the filter started in an empty project")
				// Claimed and done, the backfed items stay known by the filter.
				got := tb.claim(t, "alice", 2)
				_, err = tb.done("alice", got...)
				require.NoError(t, err)
				res, err = tb.engine.Backfeed(tb.ctx, tb.slug, "secret_123", []string{"a", "b"})
				require.NoError(t, err)
				require.Equal(t, 2, res.Duplicate)
				require.Equal(t, "1", bloomOnly(), "backfeed and claims keep it")

				// An item done behind the filter's back (no script does
				// this) shows the look-ups are skipped while bloom_only is set.
				require.NoError(t, tb.rdb.SAdd(tb.ctx, queues.DoneKey(tb.slug), "ghost").Err())
				res, err = tb.engine.Backfeed(tb.ctx, tb.slug, "secret_123", []string{"ghost"})
				require.NoError(t, err)
				require.Equal(t, 1, res.New, "not looked up")
				require.NoError(t, tb.rdb.HDel(tb.ctx, queues.ConfigKey(tb.slug), "bloom_only").Err())
				require.NoError(t, tb.rdb.SAdd(tb.ctx, queues.DoneKey(tb.slug), "ghost2").Err())
				res, err = tb.engine.Backfeed(tb.ctx, tb.slug, "secret_123", []string{"ghost2"})
				require.NoError(t, err)
				require.Equal(t, queues.BackfeedResult{Received: 1, Duplicate: 1, Placed: 1}, res,
					"without bloom_only (a project of the build before) every unseen item is looked up")
				require.NoError(t, tb.rdb.HSet(tb.ctx, queues.ConfigKey(tb.slug), "bloom_only", "1").Err())

				// An item let in without the filter clears it, in the same step.
				switch bypass {
				case "enqueue":
					tb.enqueue(t, todo, "x")
				case "scored":
					_, err = tb.engine.EnqueueScored(tb.ctx, tb.slug, []queues.QueueItem{{Name: "x", Score: 1}})
					require.NoError(t, err)
					// Backfeed looks in the list queues' index, not the
					// scored queue (claim.lua drops a popped copy of an
					// item out): x is looked up once it is out.
					require.Equal(t, []string{"x"}, tb.claim(t, "bob", 1))
				case "import":
					imp, err := tb.engine.ImportDone(tb.ctx, tb.slug, []string{"x"})
					require.NoError(t, err)
					require.Equal(t, 1, imp.Imported)
				}
				require.Empty(t, bloomOnly(), "%s lets an item in without the filter", bypass)
				res, err = tb.engine.Backfeed(tb.ctx, tb.slug, "secret_123", []string{"x", "y"})
				require.NoError(t, err)
				require.Equal(t, 1, res.New, "y only: x is where %s put it", bypass)
				require.Equal(t, 1, res.Duplicate)
				res, err = tb.engine.Backfeed(tb.ctx, tb.slug, "secret_123", []string{"x"})
				require.NoError(t, err)
				require.Equal(t, 1, res.Duplicate)
			})
		}
	})
}

// TestBloomOnlyIsNotSetWhenTheFilterStartsInAProjectWithItems: items
// queued, claimed, done or failed before the first backfeed bypassed the
// filter, so the batch that starts it does not set bloom_only, and such an
// item is found where it is.
func TestBloomOnlyIsNotSetWhenTheFilterStartsInAProjectWithItems(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		for _, before := range []string{"queued", "done", "imported"} {
			t.Run(before, func(t *testing.T) {
				tb := setupProject(t, b, "proj-"+before, queues.SettingsPatch{BackfeedSecret: ptr("secret_123"), BloomCapacity: ptr(1000)})
				switch before {
				case "queued":
					tb.enqueue(t, todo, "x")
				case "done":
					tb.enqueue(t, todo, "x")
					_, err := tb.done("alice", tb.claim(t, "alice", 1)...)
					require.NoError(t, err)
				case "imported":
					_, err := tb.engine.ImportDone(tb.ctx, tb.slug, []string{"x"})
					require.NoError(t, err)
				}
				res, err := tb.engine.Backfeed(tb.ctx, tb.slug, "secret_123", []string{"x", "y"})
				require.NoError(t, err)
				require.Equal(t, 1, res.New, "y only")
				require.Equal(t, 1, res.Duplicate)
				exists, err := tb.rdb.HExists(tb.ctx, queues.ConfigKey(tb.slug), "bloom_only").Result()
				require.NoError(t, err)
				require.False(t, exists, "the filter started after an item came in another way")
				res, err = tb.engine.Backfeed(tb.ctx, tb.slug, "secret_123", []string{"x", "z"})
				require.NoError(t, err)
				require.Equal(t, 1, res.New, "z only")
			})
		}
	})
}
