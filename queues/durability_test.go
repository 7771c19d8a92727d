package queues_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/queues"
)

// redisSnapshot is every key of one project as Redis would reload it from
// an AOF that stops at some point: the value (DUMP) and the time to live.
type redisSnapshot map[string]snapshotEntry

type snapshotEntry struct {
	dump string
	ttl  time.Duration // 0: no expiry
}

// projectKeys lists every key carrying the project's hash tag. They all
// live in one slot, so on a cluster exactly one master answers.
func projectKeys(t *testing.T, tb bundle) []string {
	t.Helper()
	pattern := "hoard:{" + tb.slug + "}:*"
	var keys []string
	scan := func(node redis.Cmdable) {
		iter := node.Scan(tb.ctx, 0, pattern, 1000).Iterator()
		for iter.Next(tb.ctx) {
			keys = append(keys, iter.Val())
		}
		require.NoError(t, iter.Err())
	}
	if cluster, ok := tb.rdb.(*redis.ClusterClient); ok {
		require.NoError(t, cluster.ForEachMaster(tb.ctx, func(_ context.Context, master *redis.Client) error {
			scan(master)
			return nil
		}))
	} else {
		scan(tb.rdb)
	}
	require.NotEmpty(t, keys)
	return keys
}

// snapshotProject is what Redis had on disk at this moment.
func snapshotProject(t *testing.T, tb bundle) redisSnapshot {
	t.Helper()
	snapshot := redisSnapshot{}
	for _, key := range projectKeys(t, tb) {
		dump, err := tb.rdb.Dump(tb.ctx, key).Result()
		require.NoError(t, err, key)
		ttl, err := tb.rdb.PTTL(tb.ctx, key).Result()
		require.NoError(t, err, key)
		snapshot[key] = snapshotEntry{dump: dump, ttl: max(ttl, 0)}
	}
	return snapshot
}

// crashBackTo makes Redis lose every write since the snapshot, as a
// restart from an AOF whose tail was never fsynced does: keys written
// since are put back as they were, keys created since are gone.
func crashBackTo(t *testing.T, tb bundle, snapshot redisSnapshot) {
	t.Helper()
	for _, key := range projectKeys(t, tb) {
		if _, kept := snapshot[key]; !kept {
			require.NoError(t, tb.rdb.Del(tb.ctx, key).Err(), key)
		}
	}
	for key, entry := range snapshot {
		require.NoError(t, tb.rdb.RestoreReplace(tb.ctx, key, entry.ttl, entry.dump).Err(), key)
	}
}

// TestDoneLostByRedisComesBackAsWork: with appendfsync everysec, a crash of
// Redis can lose a done hoard already acknowledged (docs/durability.md).
// The item is then back in out, claimed by the warrior that finished it; the
// reclaim hands it out again after the TTL, and its second done counts it
// once. An item can be done twice this way; it is never lost.
func TestDoneLostByRedisComesBackAsWork(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		// A new project's defaults (reclaim after 6 h) and a budget limit,
		// so the budget is kept and checked with the claims.
		tb := setup(t, b, queues.SettingsPatch{DownloaderBudget: ptr(50)})
		tb.enqueue(t, todo, "x", "y")
		require.Equal(t, []string{"x"}, tb.claim(t, "alice", 1))
		onDisk := snapshotProject(t, tb) // the last fsync before the crash

		tb.clock.Advance(10 * time.Minute)
		res, err := tb.done("alice", "x")
		require.NoError(t, err)
		require.Equal(t, queues.DoneResult{New: 1}, res, "alice was told OK")
		require.EqualValues(t, 1, tb.counts(t).Done)

		crashBackTo(t, tb, onDisk)
		c := tb.counts(t)
		require.Equal(t, queues.Counts{Todo: 1, Out: 1, OldestClaimAgeSeconds: 600}, c, "the done is gone; x is out again")
		assertPlaces(t, tb, map[string]string{"x": "out", "y": "todo"})
		checkIndexesAgree(t, tb)

		// Nothing comes back before the TTL: x is alice's claim until then.
		require.Equal(t, []string{"y"}, tb.claim(t, "bobby", 5))
		tb.clock.Advance(6*time.Hour - 10*time.Minute - time.Millisecond)
		requireCode(t, tb.claimErr("bobby", 1), queues.CodeNoItem)
		require.Zero(t, tb.counts(t).Reclaimable)

		tb.clock.Advance(time.Millisecond)
		require.EqualValues(t, 1, tb.counts(t).Reclaimable)
		claim, err := tb.engine.Claim(tb.ctx, queues.ClaimRequest{Project: tb.slug, Downloader: "carol", IP: "127.0.0.1", Count: 5})
		require.NoError(t, err)
		require.Len(t, claim.Items, 1)
		require.Equal(t, "x", claim.Items[0].Name, "handed out again")
		require.Equal(t, 1, claim.Reclaims)

		res, err = tb.done("carol", "x")
		require.NoError(t, err)
		require.Equal(t, queues.DoneResult{New: 1}, res)
		res, err = tb.done("bobby", "y")
		require.NoError(t, err)
		require.Equal(t, queues.DoneResult{New: 1}, res)
		// alice's warrior repeating its report changes nothing now.
		res, err = tb.done("alice", "x")
		require.NoError(t, err)
		require.Equal(t, queues.DoneResult{Duplicates: 1}, res)

		// Counted once: Redis never kept alice's done, so x's completion,
		// its bytes and its leaderboard credit are carol's alone. (alice's
		// upload did happen: the data exists twice downstream.)
		stats, err := tb.engine.Stats(tb.ctx, tb.slug)
		require.NoError(t, err)
		require.Equal(t, queues.Counts{Done: 2}, stats.Counts)
		require.EqualValues(t, 2, stats.Counters["items_done"])
		require.EqualValues(t, 1, stats.Counters["items_reclaimed"])
		credit, err := tb.rdb.HGetAll(tb.ctx, queues.DownloaderItemsKey(tb.slug)).Result()
		require.NoError(t, err)
		require.Equal(t, map[string]string{"carol": "1", "bobby": "1"}, credit)
		assertPlaces(t, tb, map[string]string{"x": "done", "y": "done"})
		budget, err := tb.rdb.HGetAll(tb.ctx, queues.BudgetKey(tb.slug)).Result()
		require.NoError(t, err)
		require.Empty(t, budget, "nobody holds a claim any more")
	})
}
