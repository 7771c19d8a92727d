package queues_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/queues"
)

// setsMembers sums the members of every bucket of generation g, a sets
// generation of `buckets` buckets, and checks each is still an intset.
func setsMembers(t *testing.T, tb bundle, g int, buckets uint64) int64 {
	t.Helper()
	var total int64
	for b := range buckets {
		key := queues.BloomBucketKey(tb.slug, g, b)
		n, err := tb.rdb.SCard(tb.ctx, key).Result()
		require.NoError(t, err)
		if n > 0 {
			encoding, err := tb.rdb.ObjectEncoding(tb.ctx, key).Result()
			require.NoError(t, err)
			require.Equal(t, "intset", encoding, key)
		}
		total += n
	}
	return total
}

// bucketsOf reads a sets shape "s<B>:<cap>".
func bucketsOf(t *testing.T, shape string) uint64 {
	t.Helper()
	head, _, ok := strings.Cut(shape, ":")
	require.True(t, ok && strings.HasPrefix(head, "s"), "a sets shape: %q", shape)
	buckets, err := strconv.ParseUint(head[1:], 10, 64)
	require.NoError(t, err)
	return buckets
}

func bloomShapes(t *testing.T, tb bundle) []string {
	t.Helper()
	text, err := tb.rdb.HGet(tb.ctx, queues.BloomMetaKey(tb.slug), "shapes").Result()
	require.NoError(t, err)
	return strings.Split(text, ",")
}

// TestBloomSetsAnswerExactlyNew: with bloom_kind sets, every item is new
// once, whether it repeats within a batch, across batches or across
// generations; generations roll over at capacity, and each keeps one
// member per item, in intset buckets.
func TestBloomSetsAnswerExactlyNew(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{BackfeedSecret: ptr("secret_123"), BloomCapacity: ptr(1000), BloomKind: ptr(queues.BloomKindSets)})
		items := names("item-", 2500)
		// Within a batch: each of the first 100 items twice.
		batch := append(append([]string{}, items[:1200]...), items[:100]...)
		res, err := tb.engine.Backfeed(tb.ctx, tb.slug, "secret_123", batch)
		require.NoError(t, err)
		require.Equal(t, queues.BackfeedResult{Received: 1300, New: 1200, Duplicate: 100}, res)
		// Across batches and generations: the first 1,200 again with the rest.
		res, err = tb.engine.Backfeed(tb.ctx, tb.slug, "secret_123", items)
		require.NoError(t, err)
		require.Equal(t, queues.BackfeedResult{Received: 2500, New: 1300, Duplicate: 1200}, res)
		require.EqualValues(t, 2500, tb.counts(t).Backfeed)

		shapes := bloomShapes(t, tb)
		want, err := queues.BloomShapeOf(queues.BloomKindSets, 1000, queues.DefaultBloomFPRate, 0)
		require.NoError(t, err)
		require.Equal(t, []string{want, want, want}, shapes, "a new sets generation after each 1,000 items")
		buckets := bucketsOf(t, want)
		require.EqualValues(t, 4, buckets, "1,000 items at most 320 a bucket")
		require.EqualValues(t, 1000, setsMembers(t, tb, 1, buckets))
		require.EqualValues(t, 1000, setsMembers(t, tb, 2, buckets))
		require.EqualValues(t, 500, setsMembers(t, tb, 3, buckets))
		count, err := tb.rdb.HGet(tb.ctx, queues.BloomMetaKey(tb.slug), "count").Result()
		require.NoError(t, err)
		require.Equal(t, "500", count)
		for g := 1; g <= 3; g++ {
			require.Zero(t, tb.rdb.Exists(tb.ctx, queues.BloomKey(tb.slug, g)).Val(), "a sets generation has no bit string")
		}

		// Everything known, nothing queued twice.
		res, err = tb.engine.Backfeed(tb.ctx, tb.slug, "secret_123", items)
		require.NoError(t, err)
		require.Equal(t, queues.BackfeedResult{Received: 2500, Duplicate: 2500}, res)
		require.EqualValues(t, 2500, tb.counts(t).Backfeed)

		// `queue add --register` uses the same generations.
		res, err = tb.engine.EnqueueRegistered(tb.ctx, tb.slug, queues.QueueBackfeed, []string{items[7], "registered:new"})
		require.NoError(t, err)
		require.Equal(t, 1, res.New)
		require.Equal(t, 1, res.Duplicate)

		// With limit groups, an item carries its target before its member.
		_, err = tb.engine.SetLimitGroups(tb.ctx, tb.slug, []queues.LimitGroup{{Name: "users", Type: "user", RatePerMinute: 0}})
		require.NoError(t, err)
		res, err = tb.engine.Backfeed(tb.ctx, tb.slug, "secret_123", []string{"user:x", "post:y", "user:x", items[3]})
		require.NoError(t, err)
		require.Equal(t, 2, res.New)
		require.Equal(t, 2, res.Duplicate)
		assertPlaces(t, tb, map[string]string{"user:x": "todo:backfeed:g:users", "post:y": "todo:backfeed"})
		res, err = tb.engine.Backfeed(tb.ctx, tb.slug, "secret_123", []string{"user:x", "post:y"})
		require.NoError(t, err)
		require.Equal(t, 2, res.Duplicate)
	})
}

// TestBloomSetsRollOverTestsTheFullGeneration: when a batch fills the
// newest sets generation and starts the next, the items after the
// rollover are still tested against the full one (whose SADD answered for
// the items before it).
func TestBloomSetsRollOverTestsTheFullGeneration(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{BackfeedSecret: ptr("secret_123"), BloomCapacity: ptr(1000), BloomKind: ptr(queues.BloomKindSets)})
		first := names("a", 995)
		res, err := tb.engine.Backfeed(tb.ctx, tb.slug, "secret_123", first)
		require.NoError(t, err)
		require.Equal(t, 995, res.New)
		// 5 fill generation 1, then a0010 (in generation 1) comes after the
		// rollover, then 5 more new, then b0000 again and a0994.
		batch := append(names("b", 5), "a0010")
		batch = append(batch, names("c", 5)...)
		batch = append(batch, "b0000", "a0994")
		res, err = tb.engine.Backfeed(tb.ctx, tb.slug, "secret_123", batch)
		require.NoError(t, err)
		require.Equal(t, queues.BackfeedResult{Received: 13, New: 10, Duplicate: 3}, res)
		require.Len(t, bloomShapes(t, tb), 2)
		count, err := tb.rdb.HGet(tb.ctx, queues.BloomMetaKey(tb.slug), "count").Result()
		require.NoError(t, err)
		require.Equal(t, "5", count, "the c items went into generation 2")
		require.EqualValues(t, 1005, tb.counts(t).Backfeed)
	})
}

// TestBloomKindShapesOnlyNewGenerations: switching a project's kind keeps
// every item known to the generations it already has, in both directions.
func TestBloomKindShapesOnlyNewGenerations(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{BackfeedSecret: ptr("secret_123"), BloomCapacity: ptr(1000)})
		blocked := names("blocked-", 1500)
		res, err := tb.engine.Backfeed(tb.ctx, tb.slug, "secret_123", blocked)
		require.NoError(t, err)
		require.Equal(t, 1500, res.New)

		_, err = tb.engine.UpdateProject(tb.ctx, tb.slug, queues.SettingsPatch{BloomKind: ptr(queues.BloomKindSets)})
		require.NoError(t, err)
		sets := names("sets-", 1500)
		res, err = tb.engine.Backfeed(tb.ctx, tb.slug, "secret_123", append(append([]string{}, sets...), blocked...))
		require.NoError(t, err)
		require.Equal(t, queues.BackfeedResult{Received: 3000, New: 1500, Duplicate: 1500}, res)

		_, err = tb.engine.UpdateProject(tb.ctx, tb.slug, queues.SettingsPatch{BloomKind: ptr(queues.BloomKindBlocked)})
		require.NoError(t, err)
		again := names("again-", 1200)
		all := append(append(append([]string{}, again...), sets...), blocked...)
		res, err = tb.engine.Backfeed(tb.ctx, tb.slug, "secret_123", all)
		require.NoError(t, err)
		require.Equal(t, queues.BackfeedResult{Received: 4200, New: 1200, Duplicate: 3000}, res)
		res, err = tb.engine.Backfeed(tb.ctx, tb.slug, "secret_123", all)
		require.NoError(t, err)
		require.Equal(t, 4200, res.Duplicate)

		blockedShape, err := queues.BloomShape(1000, queues.DefaultBloomFPRate, 0)
		require.NoError(t, err)
		setsShape, err := queues.BloomShapeOf(queues.BloomKindSets, 1000, queues.DefaultBloomFPRate, 0)
		require.NoError(t, err)
		// Generations 1-2 blocked (1,000 + 500); the sets kind starts with
		// the next generation: 500 more fill generation 2, 1,000 generation
		// 3 (sets); back to blocked, the 1,200 start generations 4 and 5.
		require.Equal(t, []string{blockedShape, blockedShape, setsShape, blockedShape, blockedShape}, bloomShapes(t, tb))
		require.EqualValues(t, 4200, tb.counts(t).Backfeed)
	})
}

// TestBloomKindBadSettingsChangeNothing: an unknown kind, or a rate a sets
// generation cannot reach, is refused with the field named, and the
// project keeps its settings.
func TestBloomKindBadSettingsChangeNothing(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{BackfeedSecret: ptr("secret_123"), BloomKind: ptr(queues.BloomKindSets)})
		_, err := tb.engine.UpdateProject(tb.ctx, tb.slug, queues.SettingsPatch{BloomKind: ptr("cuckoo")})
		requireCode(t, err, queues.CodeInvalid)
		require.ErrorContains(t, err, "bloom_kind")
		_, err = tb.engine.UpdateProject(tb.ctx, tb.slug, queues.SettingsPatch{BloomFPRate: ptr(1e-9)})
		requireCode(t, err, queues.CodeInvalid)
		require.ErrorContains(t, err, "bloom_fp_rate")
		_, err = tb.engine.CreateProject(tb.ctx, "other", queues.SettingsPatch{BloomKind: ptr("Sets")})
		requireCode(t, err, queues.CodeInvalid)

		project, err := tb.engine.Project(tb.ctx, tb.slug)
		require.NoError(t, err)
		require.Equal(t, queues.BloomKindSets, project.BloomKind)
		require.Equal(t, queues.DefaultBloomFPRate, project.BloomFPRate)
		require.Zero(t, tb.rdb.Exists(tb.ctx, queues.ConfigKey("other")).Val(), "no project created")
		// The default and blocked projects still take any rate.
		_, err = tb.engine.UpdateProject(tb.ctx, tb.slug, queues.SettingsPatch{BloomKind: ptr(queues.BloomKindBlocked), BloomFPRate: ptr(1e-9)})
		require.NoError(t, err)
	})
}

// TestBloomSetsFailedPushUndoesTheAdds: when a push fails (a wrongly typed
// queue), the fingerprints the batch added are taken out again, so no item
// is in the filter that is queued nowhere; once the queue is fixed the
// same items are new.
func TestBloomSetsFailedPushUndoesTheAdds(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{BackfeedSecret: ptr("secret_123"), BloomCapacity: ptr(1000), BloomKind: ptr(queues.BloomKindSets)})
		res, err := tb.engine.Backfeed(tb.ctx, tb.slug, "secret_123", names("first-", 100))
		require.NoError(t, err)
		require.Equal(t, 100, res.New)
		require.NoError(t, tb.rdb.Del(tb.ctx, queues.QueueKey(tb.slug, queues.QueueBackfeed)).Err())
		require.NoError(t, tb.rdb.Set(tb.ctx, queues.QueueKey(tb.slug, queues.QueueBackfeed), "not a list", 0).Err())

		items := names("second-", 50)
		_, err = tb.engine.Backfeed(tb.ctx, tb.slug, "secret_123", items)
		require.Error(t, err)
		buckets := bucketsOf(t, bloomShapes(t, tb)[0])
		require.EqualValues(t, 100, setsMembers(t, tb, 1, buckets), "the failed batch's adds were undone")

		require.NoError(t, tb.rdb.Del(tb.ctx, queues.QueueKey(tb.slug, queues.QueueBackfeed)).Err())
		res, err = tb.engine.Backfeed(tb.ctx, tb.slug, "secret_123", items)
		require.NoError(t, err)
		require.Equal(t, 50, res.New)
		length, err := tb.rdb.LLen(tb.ctx, queues.QueueKey(tb.slug, queues.QueueBackfeed)).Result()
		require.NoError(t, err)
		require.EqualValues(t, 50, length)
	})
}

// TestDeleteProjectRemovesSetsBuckets: deleting a project removes its sets
// generations' buckets with the rest of its keys.
func TestDeleteProjectRemovesSetsBuckets(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{BackfeedSecret: ptr("secret_123"), BloomCapacity: ptr(1000), BloomKind: ptr(queues.BloomKindSets)})
		res, err := tb.engine.Backfeed(tb.ctx, tb.slug, "secret_123", names("item-", 1500))
		require.NoError(t, err)
		require.Equal(t, 1500, res.New)
		buckets := bucketsOf(t, bloomShapes(t, tb)[0])
		require.EqualValues(t, 1000, setsMembers(t, tb, 1, buckets))

		_, err = tb.engine.DeleteProject(tb.ctx, tb.slug, false)
		require.NoError(t, err)
		for g := 1; g <= 2; g++ {
			for bucket := range buckets {
				require.Zero(t, tb.rdb.Exists(tb.ctx, queues.BloomBucketKey(tb.slug, g, bucket)).Val())
			}
		}
		// Made again under the same name, it starts with an empty filter.
		tb = setup(t, b, queues.SettingsPatch{BackfeedSecret: ptr("secret_123"), BloomCapacity: ptr(1000), BloomKind: ptr(queues.BloomKindSets)})
		res, err = tb.engine.Backfeed(tb.ctx, tb.slug, "secret_123", names("item-", 1500))
		require.NoError(t, err)
		require.Equal(t, 1500, res.New)
	})
}

// TestBloomSetsFalsePositiveRate fills a sets generation of 50k items and
// offers 50k other distinct items: at ~160 items a bucket a false
// positive has a chance of ~3.7e-8 per item (f/2^32), so any at all would
// say the fingerprints or buckets are wrong.
func TestBloomSetsFalsePositiveRate(t *testing.T) {
	b := redistest.Require(t)[0]
	require.NoError(t, redistest.Flush(t.Context(), b))
	const n = 50_000
	tb := setup(t, b, queues.SettingsPatch{BackfeedSecret: ptr("secret_123"), BloomCapacity: ptr(100_000), BloomKind: ptr(queues.BloomKindSets)})
	offer := func(prefix string) queues.BackfeedResult {
		var total queues.BackfeedResult
		for start := 0; start < n; start += 10_000 {
			batch := make([]string, 10_000)
			for i := range batch {
				batch[i] = prefix + strconv.Itoa(start+i)
			}
			res, err := tb.engine.Backfeed(tb.ctx, tb.slug, "secret_123", batch)
			require.NoError(t, err)
			total.New += res.New
			total.Duplicate += res.Duplicate
		}
		return total
	}
	require.Equal(t, queues.BackfeedResult{New: n}, offer("https://example.org/first/"))
	require.Equal(t, queues.BackfeedResult{New: n}, offer("https://example.org/second/"))
	require.Equal(t, n, offer("https://example.org/first/").Duplicate)
}

// TestBloomSetsFailedAddUndoesTheAdds: a wrongly typed bucket fails the
// batch at its first item there, and the adds before it are taken out
// again, so nothing of the batch is left in the filter or queued.
func TestBloomSetsFailedAddUndoesTheAdds(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{BackfeedSecret: ptr("secret_123"), BloomCapacity: ptr(1000), BloomKind: ptr(queues.BloomKindSets)})
		res, err := tb.engine.Backfeed(tb.ctx, tb.slug, "secret_123", names("first-", 100))
		require.NoError(t, err)
		require.Equal(t, 100, res.New)
		buckets := bucketsOf(t, bloomShapes(t, tb)[0])
		// Which bucket the second batch's first item goes to, from a
		// project of the same shape: another one breaks, so that item is
		// added before the failure and must be taken out again.
		probe := setupProject(t, b, "probe", queues.SettingsPatch{BackfeedSecret: ptr("secret_123"), BloomCapacity: ptr(1000), BloomKind: ptr(queues.BloomKindSets)})
		second := names("second-", 100)
		_, err = probe.engine.Backfeed(probe.ctx, probe.slug, "secret_123", second[:1])
		require.NoError(t, err)
		first := buckets
		for bucket := range buckets {
			if probe.rdb.SCard(probe.ctx, queues.BloomBucketKey(probe.slug, 1, bucket)).Val() == 1 {
				first = bucket
			}
		}
		require.Less(t, first, buckets)
		broken := (first + 1) % buckets
		key := queues.BloomBucketKey(tb.slug, 1, broken)
		require.NoError(t, tb.rdb.Del(tb.ctx, key).Err())
		require.NoError(t, tb.rdb.Set(tb.ctx, key, "not a set", 0).Err())
		before := setsMembersBut(t, tb, 1, buckets, broken)

		_, err = tb.engine.Backfeed(tb.ctx, tb.slug, "secret_123", second)
		require.Error(t, err)
		require.Equal(t, before, setsMembersBut(t, tb, 1, buckets, broken), "the adds before the failure were undone")
		length, err := tb.rdb.LLen(tb.ctx, queues.QueueKey(tb.slug, queues.QueueBackfeed)).Result()
		require.NoError(t, err)
		require.EqualValues(t, 100, length, "nothing of the failed batch queued")
	})
}

// setsMembersBut sums generation g's buckets but `broken`.
func setsMembersBut(t *testing.T, tb bundle, g int, buckets, broken uint64) int64 {
	t.Helper()
	var total int64
	for bucket := range buckets {
		if bucket == broken {
			continue
		}
		n, err := tb.rdb.SCard(tb.ctx, queues.BloomBucketKey(tb.slug, g, bucket)).Result()
		require.NoError(t, err)
		total += n
	}
	return total
}
