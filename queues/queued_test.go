package queues_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/queues"
)

// An item waits in one place at most: queueing it again, into any queue,
// is refused and said, so todo and the other counts are the work left (the
// operator's report: the same 2 items queued twice showed "todo 4").
func TestQueueCountsAreHonest(t *testing.T) {
	forEachMode(t, queues.SettingsPatch{BackfeedSecret: ptr("secret_123"), ReclaimEnabled: ptr(true)}, func(t *testing.T, tb bundle, mode string) {
		require.Equal(t, queues.EnqueueResult{Queued: 2, Length: 2}, tb.enqueueResult(t, todo, "a", "b"))
		require.Equal(t, queues.EnqueueResult{AlreadyQueued: 2, Length: 2}, tb.enqueueResult(t, todo, "a", "b"))
		require.EqualValues(t, 2, tb.counts(t).Todo)

		// Twice in one batch, and into other queues: still one copy.
		require.Equal(t, queues.EnqueueResult{Queued: 1, AlreadyQueued: 2, Length: 1},
			tb.enqueueResult(t, queues.Target{Queue: queues.QueueSecondary}, "c", "c", "a"))
		require.Equal(t, queues.EnqueueResult{AlreadyQueued: 1},
			tb.enqueueResult(t, queues.Target{Downloader: "alice"}, "b"))
		// Backfeed sees items queued by an operator as duplicates.
		bf, err := tb.engine.Backfeed(tb.ctx, tb.slug, "secret_123", []string{"a", "d"})
		require.NoError(t, err)
		require.Equal(t, queues.BackfeedResult{Received: 2, New: 1, Duplicate: 1, Waiting: 1}, bf)
		// ...and the operator sees backfed items as queued.
		require.Equal(t, 1, tb.enqueueResult(t, todo, "d").AlreadyQueued)
		c := tb.counts(t)
		require.Equal(t, queues.Counts{Todo: 2, Secondary: 1, Backfeed: 1}, c)
		checkIndexesAgree(t, tb)

		// Claimed: out, not queued; queueing it again is "out or done".
		got := tb.claim(t, "alice", 1)
		require.Equal(t, []string{"a"}, got)
		require.Equal(t, queues.EnqueueResult{Skipped: 1, Length: 1}, tb.enqueueResult(t, todo, "a"))
		checkIndexesAgree(t, tb)
		// Released: waiting in redo again, so queued.
		rel, err := tb.engine.Release(tb.ctx, tb.slug, []string{"a"}, "")
		require.NoError(t, err)
		require.Equal(t, 1, rel.Released)
		require.Equal(t, 1, tb.enqueueResult(t, todo, "a").AlreadyQueued)
		checkIndexesAgree(t, tb)

		// Everything is handed out once and done once; nothing is left.
		served := map[string]int{}
		for {
			items := claimSome(t, tb, "bob", 10)
			if len(items) == 0 {
				break
			}
			for _, item := range items {
				served[item]++
			}
			_, err := tb.done("bob", items...)
			require.NoError(t, err)
		}
		require.Equal(t, map[string]int{"a": 1, "b": 1, "c": 1, "d": 1}, served)
		require.Equal(t, queues.Counts{Done: 4}, tb.counts(t))
		require.Empty(t, queuedIndex(t, tb))
		checkIndexesAgree(t, tb)
	})
}

// Items on disk are not in the index (it would cost the memory offloading
// saves), so an item queued again while its copy is in a segment gets in;
// the refill drops the segment's copy, and the item is served once.
func TestRefillDropsACopyQueuedAgainWhileOnDisk(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{OffloadAbove: ptr(2000), OffloadSegment: ptr(1000)})
		o := offloader(tb, t)
		items := names("url:", 5000)
		tb.enqueue(t, todo, items...)
		require.NoError(t, o.RunOnce(tb.ctx))
		c := tb.counts(t)
		require.EqualValues(t, 5000, c.Todo)
		require.Positive(t, c.Offloaded)
		inRedis := redisQueueLen(t, tb, queues.QueueTodo)
		require.EqualValues(t, 5000-c.Offloaded, inRedis)
		require.Len(t, queuedIndex(t, tb), int(inRedis), "offloaded items left the index")
		checkIndexesAgree(t, tb)

		// The tail went to disk; queued again, the last item waits in Redis
		// too, until the refill finds its old copy.
		last := items[len(items)-1]
		require.Equal(t, 1, tb.enqueueResult(t, todo, last).Queued)
		checkIndexesAgree(t, tb)

		seen := claimEverything(t, tb, o)
		require.Len(t, seen, 5000)
		for item, times := range seen {
			require.Equal(t, 1, times, item)
		}
		require.Equal(t, queues.Counts{Done: 5000}, tb.counts(t))
		stats, err := tb.engine.Stats(tb.ctx, tb.slug)
		require.NoError(t, err)
		require.Zero(t, stats.Counters["duplicates_dropped"], "the refill dropped the old copy: no claim met it")
		require.Empty(t, queuedIndex(t, tb))
	})
}
